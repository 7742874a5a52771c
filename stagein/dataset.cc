// Dataset: open, verify and extract.
#include "stagein/dataset.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/hash.h"
#include "common/unique_fd.h"
#include "stagein/io.h"
#include "stagein/thread_pool.h"

namespace fanstore::format {

Result<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("dataset " + dir + " does not exist");
    return Status::FromErrno("dataset " + dir, errno);
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a FanStore dataset (not a directory)");
  auto ds = std::make_unique<Dataset>();
  ds->dir_ = dir;
  auto m = LoadManifest(dir);
  if (!m.ok()) return m.status();
  ds->manifest_ = std::move(m).value();
  FS_RETURN_IF_ERROR(ds->dict_.Load(dir, ds->manifest_.dict));
  // Footers and indexes are read and parsed in parallel (on a parallel file system each costs
  // round trips); the checks then run in shard order, so the error reported does not depend
  // on timing.
  const size_t n = ds->manifest_.shards.size();
  std::vector<Result<std::unique_ptr<ShardFile>>> opened;
  opened.reserve(n);
  for (size_t i = 0; i < n; i++) opened.emplace_back(Status::Aborted("not opened"));
  ParallelFor(n, std::min<size_t>(8, ThreadPool::DefaultThreads() * 2), [&](size_t i) {
    opened[i] = OpenShard(dir + "/" + ds->manifest_.shards[i].file, ds->manifest_.dataset_id);
  });
  size_t total_entries = 0;
  for (auto& sh : opened)
    if (sh.ok()) total_entries += (*sh)->entries.size();
  ds->by_path_.reserve(total_entries);
  for (size_t i = 0; i < n; i++) {
    const ShardRef& ref = ds->manifest_.shards[i];
    auto& sh = opened[i];
    if (!sh.ok()) return sh.status();
    if ((*sh)->size != ref.bytes)
      return Status::Corruption(dir + "/" + ref.file + ": size " + std::to_string((*sh)->size) +
                                " differs from the manifest's " + std::to_string(ref.bytes) + " (truncated?)");
    if ((*sh)->header.shard_id != i)
      return Status::Corruption(dir + "/" + ref.file + ": shard id " + std::to_string((*sh)->header.shard_id) +
                                " where the manifest expects " + std::to_string(i));
    for (uint32_t j = 0; j < (*sh)->entries.size(); j++) {
      const auto& e = (*sh)->entries[j];
      if (e.codec == Codec::kZstdDict && !ds->dict_.ddict())
        return Status::Corruption(dir + "/" + ref.file + ": file '" + e.path + "' needs a dictionary the manifest does not list");
      if (!ds->by_path_.emplace(e.path, Ref{static_cast<uint32_t>(i), j}).second)
        return Status::Corruption(dir + "/" + ref.file + ": path '" + e.path + "' appears twice in the dataset");
    }
    ds->shards_.push_back(std::move(sh).value());
  }
  // Every parent of every entry must be a directory entry.
  for (const auto& [path, r] : ds->by_path_) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) continue;
    auto parent = ds->by_path_.find(std::string_view(path).substr(0, slash));
    if (parent == ds->by_path_.end() || ds->shards_[parent->second.shard]->entries[parent->second.entry].type != EntryType::kDir)
      return Status::Corruption(dir + "/" + ds->manifest_.shards[r.shard].file + ": '" + path +
                                "' has no parent directory entry");
  }
  return ds;
}

const IndexEntry* Dataset::Find(const std::string& path, Ref* ref) const {
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return nullptr;
  if (ref) *ref = it->second;
  return &shards_[it->second.shard]->entries[it->second.entry];
}

std::vector<const IndexEntry*> Dataset::SortedEntries() const {
  std::vector<const IndexEntry*> v;
  v.reserve(by_path_.size());
  for (const auto& s : shards_)
    for (const auto& e : s->entries) v.push_back(&e);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->path < b->path; });
  return v;
}

namespace {

uint64_t TotalBytes(const Dataset& ds) {
  uint64_t t = 0;
  for (size_t i = 0; i < ds.shard_count(); i++) t += ds.shard(i).size;
  return t;
}

// Reads every shard once, handing each frame to fn. With at least as many shards as threads,
// each thread scans whole shards on its own (read, hash and decode back to back while the chunk
// is in cache, no hand-offs); with fewer, one shard at a time is spread over the pool. The
// error returned is that of the lowest-numbered bad shard, whatever the thread timing.
Status ScanAll(const Dataset& ds, size_t threads, const std::function<void(uint64_t, uint64_t)>& progress,
               const FrameFn& fn) {
  if (!threads) threads = ThreadPool::DefaultThreads();
  const size_t n = ds.shard_count();
  const uint64_t total = TotalBytes(ds);
  std::atomic<uint64_t> done{0};
  std::mutex progress_mu;
  auto options = [&](size_t i, ThreadPool* pool) {
    ScanOptions so;
    so.pool = pool;
    // A thread scanning a shard alone reads 256 KiB at a time, so that the chunk is still in
    // its core's cache while it hashes it (measured: 1.4x the rate of 1 MiB chunks, V1); the
    // kernel's readahead keeps the requests to the file system large.
    if (!pool) so.chunk_bytes = 256u << 10;
    so.check_file_hash = true;
    so.expect_file_xxh3 = ds.manifest().shards[i].xxh3;
    so.on_read = [&](uint64_t bytes) {
      uint64_t now = done.fetch_add(bytes) + bytes;
      if (!progress) return;
      std::lock_guard<std::mutex> l(progress_mu);
      progress(now, total);
    };
    return so;
  };
  if (n < threads || threads == 1) {
    ThreadPool pool(threads);
    for (size_t i = 0; i < n; i++) FS_RETURN_IF_ERROR(ScanShard(ds.shard(i), options(i, &pool), fn));
    return Status::OK();
  }
  std::vector<Status> results(n);
  std::atomic<size_t> first_bad{n};
  ParallelFor(n, threads, [&](size_t i) {
    if (i > first_bad.load()) return;  // a lower shard already failed: that is the answer
    results[i] = ScanShard(ds.shard(i), options(i, nullptr), fn);
    if (results[i].ok()) return;
    size_t cur = first_bad.load();
    while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
    }
  });
  return first_bad.load() < n ? results[first_bad.load()] : Status::OK();
}

}  // namespace

Status Verify(const Dataset& ds, const VerifyOptions& opts) {
  DecoderPool decoders(&ds.dict());
  return ScanAll(ds, opts.threads, opts.progress, [&](const IndexEntry& e, std::string_view stored) {
    std::string scratch;
    std::string_view raw;
    return decoders.Get()->Decode(e, stored, &scratch, &raw);
  });
}

namespace {

Status SetTimes(int dirfd, const std::string& leaf, int64_t mtime_ns, bool nofollow, const std::string& what) {
  struct timespec ts[2];
  ts[0].tv_sec = 0;
  ts[0].tv_nsec = UTIME_OMIT;
  ts[1].tv_sec = mtime_ns / 1000000000;
  ts[1].tv_nsec = mtime_ns % 1000000000;
  if (::utimensat(dirfd, leaf.c_str(), ts, nofollow ? AT_SYMLINK_NOFOLLOW : 0) != 0)
    return Status::FromErrno("set time of " + what, errno);
  return Status::OK();
}

}  // namespace

Status Extract(const Dataset& ds, const std::string& dest, const ExtractOptions& opts) {
  if (::mkdir(dest.c_str(), 0700) != 0) {
    if (errno != EEXIST) return Status::FromErrno("create " + dest, errno);
    UniqueFD probe(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!probe.valid()) return Status::FromErrno("open " + dest, errno);
    DIR* d = ::fdopendir(probe.Release());
    int count = 0;
    while (struct dirent* de = ::readdir(d)) count += std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, "..");
    ::closedir(d);
    if (count) return Status::InvalidArgument(dest + " exists and is not empty");
  }
  UniqueFD root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return Status::FromErrno("open " + dest, errno);
  auto entries = ds.SortedEntries();
  // 1. Directories (owner-writable for now; final modes are applied last).
  for (const IndexEntry* e : entries) {
    if (e->type != EntryType::kDir) continue;
    std::string leaf;
    auto parent = OpenParentDir(root.get(), e->path, &leaf);
    if (!parent.ok()) return parent.status();
    if (::mkdirat(parent->get(), leaf.c_str(), 0700) != 0)
      return Status::FromErrno("create directory " + dest + "/" + e->path, errno);
  }
  // 2. File content, decoded and verified on all cores while the shards stream in.
  DecoderPool decoders(&ds.dict());
  Status st = ScanAll(ds, opts.threads, opts.progress, [&](const IndexEntry& e, std::string_view stored) -> Status {
    if (e.type != EntryType::kFile) return Status::OK();
    std::string scratch;
    std::string_view raw;
    FS_RETURN_IF_ERROR(decoders.Get()->Decode(e, stored, &scratch, &raw));
    std::string leaf;
    auto parent = OpenParentDir(root.get(), e.path, &leaf);
    if (!parent.ok()) return parent.status();
    UniqueFD fd(::openat(parent->get(), leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return Status::FromErrno("create " + dest + "/" + e.path, errno);
    FS_RETURN_IF_ERROR(WriteFull(fd.get(), raw.data(), raw.size(), dest + "/" + e.path));
    if (::fchmod(fd.get(), e.mode) != 0) return Status::FromErrno("chmod " + e.path, errno);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {e.mtime_ns / 1000000000, e.mtime_ns % 1000000000}};
    if (::futimens(fd.get(), ts) != 0) return Status::FromErrno("set time of " + e.path, errno);
    return Status::OK();
  });
  if (!st.ok()) return st;
  // 3. Symlinks, after everything else, so none can redirect a write.
  FrameDecoder dec(&ds.dict());
  for (const IndexEntry* e : entries) {
    if (e->type != EntryType::kSymlink) continue;
    Dataset::Ref ref;
    ds.Find(e->path, &ref);
    std::string target;
    FS_RETURN_IF_ERROR(ReadEntry(ds.shard(ref.shard), *e, &dec, &target));
    std::string leaf;
    auto parent = OpenParentDir(root.get(), e->path, &leaf);
    if (!parent.ok()) return parent.status();
    if (::symlinkat(target.c_str(), parent->get(), leaf.c_str()) != 0)
      return Status::FromErrno("create symlink " + dest + "/" + e->path, errno);
    FS_RETURN_IF_ERROR(SetTimes(parent->get(), leaf, e->mtime_ns, true, e->path));
  }
  // 4. Directory modes and times, deepest first so that children do not disturb parents.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const IndexEntry* e = *it;
    if (e->type != EntryType::kDir) continue;
    std::string leaf;
    auto parent = OpenParentDir(root.get(), e->path, &leaf);
    if (!parent.ok()) return parent.status();
    if (::fchmodat(parent->get(), leaf.c_str(), e->mode, 0) != 0) return Status::FromErrno("chmod " + e->path, errno);
    FS_RETURN_IF_ERROR(SetTimes(parent->get(), leaf, e->mtime_ns, false, e->path));
  }
  const Manifest& m = ds.manifest();
  if (::fchmod(root.get(), m.root_mode) != 0) return Status::FromErrno("chmod " + dest, errno);
  struct timespec ts[2] = {{0, UTIME_OMIT}, {m.root_mtime_ns / 1000000000, m.root_mtime_ns % 1000000000}};
  if (::futimens(root.get(), ts) != 0) return Status::FromErrno("set time of " + dest, errno);
  return Status::OK();
}

}  // namespace fanstore::format
