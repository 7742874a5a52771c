// Lazy unpack (see unpack.h).
#include "agent/unpack.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "common/env.h"
#include "common/io.h"
#include "common/log.h"
#include "common/thread_pool.h"
#include "stage/stage.h"

namespace fanstore::agent {

using format::EntryType;
using format::IndexEntry;
using Clock = std::chrono::steady_clock;

namespace {

// A client unpacked the file itself (table::kRawCopy) after our claim: it is complete, since
// clients link only finished files into place.
Status DoneByClient(Status st) { return st.code() == Status::Code::kExists ? Status::OK() : st; }

}  // namespace

void LowerThreadPriority() {
  thread_local bool done = false;
  if (!done) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  done = true;
}

void Unpacker::Init(Context ctx, const std::vector<uint32_t>& mine) {
  ctx_ = std::move(ctx);
  const size_t nshards = ctx_.index->size();
  copies_.resize(nshards);
  state_.resize(nshards);
  for (uint32_t s : mine) state_[s].assign(ctx_.index->count(s), kPacked);
}

void Unpacker::Adopt(std::unique_ptr<format::ShardFile> copy) {
  const uint32_t id = copy->header.shard_id;
  copies_[id] = std::move(copy);
}

void Unpacker::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Unpacker::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool Unpacker::Claim(uint32_t shard, uint32_t entry, bool wait) {
  std::unique_lock<std::mutex> l(mu_);
  uint8_t& state = state_[shard][entry];
  if (wait) cv_.wait(l, [&] { return state != kBusy; });
  if (state != kPacked) return false;
  state = kBusy;
  return true;
}

void Unpacker::Finish(uint32_t shard, uint32_t entry, bool ok) {
  const Index& index = *ctx_.index;
  if (ok)  // from now on clients open it themselves
    ctx_.on_file(index.TableEntry(shard, entry), index.Size(shard, entry));
  else
    (void)::unlinkat(ctx_.data_root_fd, std::string(index.Path(shard, entry)).c_str(), 0);
  {
    std::lock_guard<std::mutex> l(mu_);
    state_[shard][entry] = ok ? kDone : kPacked;
  }
  cv_.notify_all();
}

Status Unpacker::EnsureUnpacked(uint32_t shard, uint32_t entry) {
  if (!Claim(shard, entry, /*wait=*/true)) {
    std::lock_guard<std::mutex> l(mu_);
    return state_[shard][entry] == kDone ? Status::OK() : Status::IOError("unpack failed");
  }
  const IndexEntry e = ctx_.index->Entry(shard, entry);
  const format::ShardFile& copy = *copies_[shard];
  Status st;
  {
    auto fd = stage::CreateStaged(ctx_.data_root_fd, ctx_.data_root, e.path);
    if (fd.ok()) {
      SparseWriter out(fd->get(), ctx_.data_root + "/" + e.path);
      st = format::StreamFrame(copy.fd.get(), copy.path, e, ctx_.dict,
                               [&](std::string_view piece) { return out.Write(piece); });
      if (st.ok()) st = out.Finish();
    } else {
      st = fd.status();
    }
  }
  st = DoneByClient(std::move(st));
  Finish(shard, entry, st.ok());
  if (st.ok()) on_demand_++;
  return st;
}

// One shard copy, scanned in order on a pool; files claimed by openers are skipped.
Status Unpacker::UnpackShard(uint32_t s, ThreadPool* workers, format::DecoderPool* decoders) {
  format::ShardFile& copy = *copies_[s];
  // Its entries, read again from the verified copy for this scan only (the table holds the
  // metadata; the agent keeps no second copy of it). Their number is known (the table was
  // built from the same bytes): the vector is made to size, without a doubling's spare room.
  FS_RETURN_IF_ERROR(format::ReadIndex(&copy, /*parse=*/false));
  std::vector<IndexEntry>(0).swap(copy.entries);
  copy.entries.reserve(ctx_.index->count(s));
  Status parsed =
      format::ForEachIndexEntry(copy.index_stored, copy.footer, [&](const IndexEntry& e) {
        copy.entries.push_back(e);
        return Status::OK();
      });
  std::string().swap(copy.index_stored);
  ScopeExit drop([&] { std::vector<IndexEntry>().swap(copy.entries); });
  FS_RETURN_IF_ERROR(parsed.Prefixed(copy.path));
  format::ScanOptions so;
  so.pool = workers;
  so.check_file_hash = true;
  // Node-local reads: small chunks lose nothing, and the chunks in flight stay a few MB (1 MiB
  // ones held 20 MB of the agent's peak beside the table at 1.33M files).
  so.chunk_bytes = 256u << 10;
  so.expect_file_xxh3 = ctx_.manifest->shards[s].xxh3;
  // A large file goes to disk as it is decoded: memory stays bounded whatever its size.
  so.dict = ctx_.dict;
  so.stream = [&](const IndexEntry& e, const format::DecodeFn& decode) -> Status {
    if (stop_) return Status::Aborted("shutting down");
    const uint32_t i = static_cast<uint32_t>(&e - copy.entries.data());
    if (!Claim(s, i, /*wait=*/false)) return Status::OK();  // the scan drops its bytes
    Status fs =
        DoneByClient(stage::WriteStagedStream(ctx_.data_root_fd, ctx_.data_root, e, decode));
    Finish(s, i, fs.ok());
    return fs;
  };
  return format::ScanShard(copy, so, [&](const IndexEntry& e, std::string_view stored) -> Status {
    if (stop_) return Status::Aborted("shutting down");
    if (e.type != EntryType::kFile) return Status::OK();
    LowerThreadPriority();
    const uint32_t i = static_cast<uint32_t>(&e - copy.entries.data());
    if (!Claim(s, i, /*wait=*/false)) return Status::OK();
    std::string_view data;
    Status fs = decoders->Get()->Decode(e, stored, nullptr, &data);
    if (fs.ok()) fs = DoneByClient(stage::WriteStaged(ctx_.data_root_fd, ctx_.data_root, e, data));
    Finish(s, i, fs.ok());
    return fs;
  });
}

// Unpacks every copy at low priority (the job's own processes come first), then removes them.
void Unpacker::Loop() {
  auto t0 = Clock::now();
  LowerThreadPriority();
  // Tests hold the background pass back to exercise unpacking on first open.
  if (const char* d = std::getenv(env::kTestUnpackDelayMs))
    for (long ms = std::strtol(d, nullptr, 10); ms > 0 && !stop_; ms -= 10) ::usleep(10000);
  bool ok = true;
  {
    ThreadPool workers(ctx_.threads);
    format::DecoderPool decoders(ctx_.dict);
    for (uint32_t s = 0; s < copies_.size() && !stop_; s++) {
      if (!copies_[s]) continue;
      Status st = UnpackShard(s, &workers, &decoders);
      if (!st.ok() && !stop_)
        LOG_ERROR("background unpack of shard %u: %s; its files are unpacked when opened", s,
                  st.ToString().c_str());
      ok = ok && st.ok();
    }
  }
  if (!ok || stop_) return;
  // Every file is in place (a file claimed by an opener when the scan passed it is waited for).
  const Index& index = *ctx_.index;
  uint64_t files = 0;
  for (uint32_t s = 0; s < copies_.size(); s++)
    for (uint32_t i = 0; copies_[s] && i < index.count(s); i++) {
      if (!index.IsFile(s, i)) continue;
      if (stop_ || !EnsureUnpacked(s, i).ok()) return;
      files++;
    }
  seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  done_ = true;
  // Nobody reads the copies any more: every file's state is kDone.
  for (auto& c : copies_)
    if (c) {
      c->fd.Reset();
      (void)::unlink(c->path.c_str());
    }
  (void)::rmdir(ctx_.copy_dir.c_str());
  LOG_INFO("unpacked %llu files in %.2f s after ready (%llu of them on first open)",
           static_cast<unsigned long long>(files), seconds_.load(),
           static_cast<unsigned long long>(on_demand_.load()));
  ctx_.on_done();
}

}  // namespace fanstore::agent
