// Files held on other nodes (see remote.h).
#include "agent/remote.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <system_error>

#include "agent/placement.h"
#include "common/hash.h"
#include "common/io.h"
#include "common/log.h"

namespace fanstore::agent {

using format::IndexEntry;

struct RemoteFiles::Inflight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

void RemoteFiles::Init(Context ctx, const std::string& cache_dir, uint64_t cache_capacity) {
  ctx_ = std::move(ctx);
  cache_.Init(cache_dir, cache_capacity);
  const Index& index = *ctx_.index;
  shard_raw_bytes_.assign(index.size(), 0);
  for (uint32_t s = 0; s < index.size(); s++)
    for (uint32_t i = 0; i < index.count(s); i++)
      if (index.IsFile(s, i)) shard_raw_bytes_[s] += index.Size(s, i);
  prefetch_seen_.assign(index.size(), false);
}

RemoteFiles::Counters RemoteFiles::counters() const {
  return Counters{opens_remote_.load(),     opens_cached_.load(),      opens_fallback_.load(),
                  bytes_remote_.load(),     bytes_cached_.load(),      bytes_fallback_.load(),
                  peer_errors_.load(),      prefetched_shards_.load(), prefetched_files_.load(),
                  prefetched_bytes_.load(), source_peak_.load(),       opens_waited_.load(),
                  opens_waited_out_.load()};
}

void RemoteFiles::Stop() {
  std::lock_guard<std::mutex> stop(stop_mu_);  // a second caller returns once they are joined
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(prefetch_mu_);
    prefetch_stop_ = true;
    threads.swap(prefetchers_);
  }
  stopping_ = true;
  prefetch_cv_.notify_all();
  for (auto& t : threads) t.join();
}

std::shared_ptr<RemoteFiles::Inflight> RemoteFiles::TryClaim(uint64_t key,
                                                             std::shared_ptr<Inflight>* held) {
  std::lock_guard<std::mutex> l(inflight_mu_);
  auto [it, fresh] = inflight_.emplace(key, nullptr);
  if (!fresh) {
    if (held) *held = it->second;
    return nullptr;
  }
  return it->second = std::make_shared<Inflight>();
}

void RemoteFiles::Release(uint64_t key, std::shared_ptr<Inflight>* mine) {
  if (!*mine) return;
  {
    std::lock_guard<std::mutex> l(inflight_mu_);
    inflight_.erase(key);
  }
  {
    std::lock_guard<std::mutex> l((*mine)->mu);
    (*mine)->done = true;
    (*mine)->cv.notify_all();
  }
  mine->reset();
}

Result<int> RemoteFiles::OpenKept(uint32_t shard, uint32_t entry, uint64_t key) {
  if (ExtentOf(shard, entry) == kNoExtent) return cache_.Open(key);
  return image_.kept(shard, entry) ? image_.open(shard, entry) : Result<int>(-1);
}

Result<int> RemoteFiles::Open(uint32_t shard, uint32_t entry) {
  const uint64_t key = ctx_.index->Meta(shard, entry).hash;  // XXH3 of its path
  const uint64_t size = ctx_.index->Size(shard, entry);
  MaybePrefetch(shard);
  auto kept = [&]() -> Result<int> {
    auto fd = OpenKept(shard, entry, key);
    if (fd.ok() && *fd >= 0) {
      opens_cached_++;
      bytes_cached_ += size;
    }
    return fd;
  };
  while (true) {
    auto fd = kept();
    if (!fd.ok() || *fd >= 0) return fd;
    // One fetch per file: later openers wait for the first, then take it from where it is kept.
    std::shared_ptr<Inflight> wait, mine = TryClaim(key, &wait);
    if (wait) {
      opens_waited_++;
      std::unique_lock<std::mutex> l(wait->mu);
      if (!wait->cv.wait_for(l, std::chrono::milliseconds(claim_wait_ms_),
                             [&] { return wait->done; })) {
        // The holder of the claim is stuck: this open fetches the file for itself, into memory
        // (its extent and cache file are the holder's to write).
        l.unlock();
        opens_waited_out_++;
        LOG_WARN("'%s': its fetch by another did not end within %d ms; fetching it for this open",
                 ctx_.index->Entry(shard, entry).path.c_str(), claim_wait_ms_);
        return FetchNew(
            shard, entry, key, [] {}, /*keep=*/false);
      }
      // Kept by the first opener, unless it failed.
      if (cache_.capacity() > 0 || ExtentOf(shard, entry) != kNoExtent) continue;
    }
    auto finish = [&] { Release(key, &mine); };
    // The first opener may have kept the file and left between our look and our claim: look
    // again before fetching it a second time.
    if (auto again = kept(); !again.ok() || *again >= 0) {
      finish();
      return again;
    }
    return FetchNew(shard, entry, key, finish);
  }
}

// The file goes straight to its extent of the image, or into a cache file; when neither can
// hold it (or writing it fails), into a sealed memfd: never whole into the agent's memory.
Result<int> RemoteFiles::FetchNew(uint32_t shard, uint32_t entry, uint64_t key,
                                  const std::function<void()>& finish, bool keep) {
  const IndexEntry e = ctx_.index->Entry(shard, entry);
  const uint64_t extent = keep ? ExtentOf(shard, entry) : kNoExtent;
  if (extent != kNoExtent) {
    bool local_error = false;
    Status st = FetchInto(shard, entry, image_.blob, extent, &local_error);
    if (st.ok()) {
      image_.keep(shard, entry);
      finish();
      return image_.open(shard, entry);
    }
    if (!local_error) {
      finish();
      return st;
    }
    LOG_WARN("%s; serving it from memory", st.ToString().c_str());
  }
  FileCache::Pending pending;
  if (keep && extent == kNoExtent && cache_.Begin(key, e.size, /*evict=*/true, &pending).ok()) {
    bool local_error = false;
    Status st = FetchInto(shard, entry, pending.fd.get(), kNoExtent, &local_error);
    if (st.ok()) {
      auto cached = cache_.Commit(&pending, /*want_fd=*/true);
      finish();
      if (cached.ok()) return cached;
      LOG_WARN("cache %s: %s; serving it from memory", e.path.c_str(),
               cached.status().ToString().c_str());
    } else {
      cache_.Abort(&pending);
      if (!local_error) {
        finish();
        return st;
      }
      LOG_WARN("%s; serving it from memory", st.ToString().c_str());
    }
  }
  UniqueFD mfd(::memfd_create("fanstore", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mfd.valid()) {
    finish();
    return Status::FromErrno("memfd_create", errno);
  }
  bool local_error = false;
  Status st = FetchInto(shard, entry, mfd.get(), kNoExtent, &local_error);
  finish();
  if (!st.ok()) return st;
  ::fcntl(mfd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  ::lseek(mfd.get(), 0, SEEK_SET);
  return mfd.Release();
}

namespace {

// Where a fetched file's bytes go: a file of its own from offset 0, its holes kept, rewound by
// truncating it; or its extent of the image's blob, rewound by writing it again from its start
// (a hole there until then: zeros are written as data, since a failed attempt may have left
// other bytes in their place).
class CopyOut {
 public:
  CopyOut(int fd, uint64_t extent, std::string what)
      : fd_(fd), extent_(extent), what_(std::move(what)) {}
  Status Write(std::string_view piece) {
    if (extent_ == RemoteFiles::kNoExtent) {
      if (!sparse_) sparse_.emplace(fd_, what_);
      return sparse_->Write(piece);
    }
    Status st = PwriteFull(fd_, piece, extent_ + written_, what_);
    written_ += piece.size();
    return st;
  }
  // The last piece written: a file's length, a hole at its end included.
  Status Finish() { return sparse_ ? sparse_->Finish() : Status::OK(); }
  Status Rewind() {
    written_ = 0;
    if (!sparse_) return Status::OK();
    if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0)
      return Status::FromErrno("rewind " + what_, errno);
    sparse_.reset();
    return Status::OK();
  }

 private:
  int fd_;
  uint64_t extent_, written_ = 0;
  std::string what_;
  std::optional<SparseWriter> sparse_;  // set by an attempt's first piece
};

}  // namespace

// Holders are tried in an order that spreads the load; `out` is rewound before every attempt.
Status RemoteFiles::FetchInto(uint32_t shard, uint32_t entry, int out, uint64_t extent,
                              bool* local_error) {
  const IndexEntry e = ctx_.index->Entry(shard, entry);
  Status write_status;
  CopyOut copy(out, extent, "the copy of '" + e.path + "'");
  auto sink = [&](std::string_view piece) { return write_status = copy.Write(piece); };
  auto finish = [&] {
    write_status = copy.Finish();
    *local_error = !write_status.ok();
    return write_status;
  };
  auto rewind = [&] {
    write_status = copy.Rewind();
    *local_error = !write_status.ok();
    return write_status.ok();
  };
  if (ctx_.peers && ctx_.size > 1) {
    const auto holders = Holders(shard, ctx_.size, ctx_.replicas);
    const size_t n = holders.size();
    for (size_t k = 0; k < n; k++) {
      uint32_t h = holders[(entry + ctx_.rank + k) % n];
      if (h == ctx_.rank || peers_.IsDown(h)) continue;  // a down peer was counted once
      if (!rewind()) return write_status;
      Xxh3Stream hash;
      write_status = Status::OK();
      Status st = peers_.Fetch(h, shard, entry, e.size, [&](std::string_view piece) {
        hash.Update(piece.data(), piece.size());
        return sink(piece);
      });
      if (!write_status.ok()) {
        *local_error = true;
        return write_status;
      }
      if (st.ok() && hash.Digest() != e.xxh3)
        st = Status::Corruption("peer " + std::to_string(h) + " sent bad bytes for '" + e.path +
                                "'");
      if (st.ok()) {
        if (!finish().ok()) return write_status;
        opens_remote_++;
        bytes_remote_ += e.size;
        return st;
      }
      peer_errors_++;
      LOG_WARN("fetch '%s' from rank %u: %s; trying %s", e.path.c_str(), h, st.ToString().c_str(),
               k + 1 < n ? "another replica" : "the dataset directory");
    }
  }
  if (!rewind()) return write_status;
  write_status = Status::OK();
  Status st = ReadFromDataset(shard, entry, sink);
  if (!write_status.ok()) {
    *local_error = true;
    return write_status;
  }
  if (st.ok()) {
    if (!finish().ok()) return write_status;
    opens_fallback_++;
    bytes_fallback_ += e.size;
  }
  return st;
}

// The file's frame read from its shard on the parallel file system (sequential preads at the
// frame's offset), decoded and verified as a stream. Bad bytes are never served: the caller
// drops what the sink got and turns the error into EIO.
Status RemoteFiles::ReadFromDataset(uint32_t shard, uint32_t entry,
                                    const std::function<Status(std::string_view)>& sink) {
  const IndexEntry e = ctx_.index->Entry(shard, entry);
  const std::string shard_path = ctx_.dataset + "/" + ctx_.manifest->shards[shard].file;
  int shard_fd;
  {
    std::lock_guard<std::mutex> l(shard_fd_mu_);
    auto it = shard_fds_.find(shard);
    if (it == shard_fds_.end()) {
      UniqueFD fd(::open(shard_path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) return Status::FromErrno("open " + shard_path, errno);
      it = shard_fds_.emplace(shard, std::move(fd)).first;
    }
    shard_fd = it->second.get();
  }
  source_slots_.acquire();
  const int now = ++source_in_flight_;
  for (int peak = source_peak_.load();
       now > peak && !source_peak_.compare_exchange_weak(peak, now);) {
  }
  ScopeExit release([this] {
    source_in_flight_--;
    source_slots_.release();
  });
  return format::StreamFrame(shard_fd, shard_path, e, ctx_.dict, sink);
}

void RemoteFiles::MaybePrefetch(uint32_t shard) {
  if (!ctx_.prefetch || !ctx_.peers || ctx_.size < 2) return;
  std::lock_guard<std::mutex> l(prefetch_mu_);
  if (prefetch_stop_ || prefetch_seen_[shard]) return;
  prefetch_seen_[shard] = true;
  // Only what fits without evicting anything: prefetch must never push out files in use. (The
  // image's blob was sized for every file.)
  if (image_.blob < 0 && shard_raw_bytes_[shard] > cache_.free_bytes()) return;
  prefetch_queue_.push_back(shard);
  try {
    while (prefetchers_.size() < std::max<uint32_t>(ctx_.prefetch_streams, 1))
      prefetchers_.emplace_back([this] { PrefetchLoop(); });
  } catch (const std::system_error& e) {  // no thread to spare: the streams started do the rest
    LOG_WARN("prefetch: %zu of %u streams started: %s", prefetchers_.size(), ctx_.prefetch_streams,
             e.what());
    if (prefetchers_.empty()) prefetch_queue_.clear();  // remote files are fetched on open
  }
  prefetch_cv_.notify_one();
}

void RemoteFiles::PrefetchLoop() {
  while (true) {
    uint32_t shard;
    {
      std::unique_lock<std::mutex> l(prefetch_mu_);
      prefetch_cv_.wait(l, [&] { return prefetch_stop_ || !prefetch_queue_.empty(); });
      if (prefetch_stop_) return;
      shard = prefetch_queue_.front();
      prefetch_queue_.erase(prefetch_queue_.begin());
    }
    PrefetchShard(shard);
  }
}

// One remote shard streamed from a holder (the next holder if it fails) into the image's
// extents or the cache.
void RemoteFiles::PrefetchShard(uint32_t shard) {
  const Index& index = *ctx_.index;
  const auto holders = Holders(shard, ctx_.size, ctx_.replicas);
  for (size_t k = 0; k < holders.size(); k++) {
    uint32_t h = holders[(ctx_.rank + shard + k) % holders.size()];
    if (h == ctx_.rank) continue;
    bool full = false, skip = false;
    // The file being received, written as its pieces arrive: to its extent of the image, under
    // a claim (no open's fetch writes it meanwhile, and none starts once it is kept), or to a
    // pending cache file.
    uint64_t key = 0, extent = kNoExtent;
    std::shared_ptr<Inflight> claim;
    FileCache::Pending pending;
    std::optional<CopyOut> copy;
    Xxh3Stream hash;
    Status st = peers_.FetchShard(
        h, shard,
        [&](uint32_t i) -> std::optional<uint64_t> {
          if (i < index.count(shard) && index.IsFile(shard, i)) return index.Size(shard, i);
          return std::nullopt;
        },
        [&](uint32_t i, uint64_t off, std::string_view piece) {
          const uint64_t size = index.Size(shard, i);
          if (stopping_) return false;
          if (off == 0) {
            // A file the job opened before the stream reached it is kept already (or being
            // fetched): its bytes are read off the connection, not written again.
            Release(key, &claim);
            key = index.Meta(shard, i).hash;
            extent = ExtentOf(shard, i);
            if (extent != kNoExtent) {
              claim = TryClaim(key);
              if ((skip = !claim || image_.kept(shard, i))) return true;
              copy.emplace(image_.blob, extent, "the image's blob");
            } else {
              if ((skip = cache_.Has(key))) return true;
              if (!cache_.Begin(key, size, /*evict=*/false, &pending).ok()) return !(full = true);
              copy.emplace(pending.fd.get(), kNoExtent, "the cache");
            }
            hash = Xxh3Stream();
          }
          if (skip) return true;
          hash.Update(piece.data(), piece.size());
          if (!copy->Write(piece).ok()) return !(full = true);
          if (off + piece.size() < size) return true;
          if (!copy->Finish().ok()) return !(full = true);
          if (hash.Digest() != index.frame(shard, i).xxh3) return false;
          if (extent != kNoExtent) {
            image_.keep(shard, i);
            // An open waiting for this file has it now, not when the next file's first piece
            // arrives (a peer that stalls mid-stream would hold it until then).
            Release(key, &claim);
          } else if (!cache_.Commit(&pending, /*want_fd=*/false).ok())
            return !(full = true);
          prefetched_files_++;
          prefetched_bytes_ += size;
          return true;
        });
    Release(key, &claim);
    if (pending.active) cache_.Abort(&pending);
    if (st.ok()) prefetched_shards_++;
    if (st.ok() || full || stopping_) return;
    LOG_WARN("prefetch of shard %u from rank %u: %s", shard, h, st.ToString().c_str());
  }
}

}  // namespace fanstore::agent
