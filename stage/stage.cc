// Stage-in: sequential shard reads, parallel decode + verify + write.
#include "stage/stage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/hash.h"
#include "common/io.h"
#include "common/table.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"

namespace fanstore::stage {

using format::EntryType;
using format::IndexEntry;

Result<std::vector<std::unique_ptr<format::ShardFile>>> OpenShards(const std::string& dataset_dir,
                                                                   const format::Manifest& m,
                                                                   const std::vector<uint32_t>& ids,
                                                                   bool parse) {
  for (uint32_t id : ids)
    if (id >= m.shards.size()) return Status::InvalidArgument("no shard " + std::to_string(id));
  // Opening a shard is a few small reads (header, footer, index): bound by the remote file
  // system's latency, not its bandwidth, so several are in flight at once.
  constexpr size_t kInFlight = 8;
  std::vector<std::unique_ptr<format::ShardFile>> out(ids.size());
  std::vector<Status> results(ids.size());
  ParallelFor(ids.size(), std::min(kInFlight, ids.size()), [&](size_t k) {
    const auto& ref = m.shards[ids[k]];
    auto sh = format::OpenShard(dataset_dir + "/" + ref.file, m.dataset_id, parse);
    results[k] = sh.ok() ? format::CheckAgainstManifest(**sh, ref, ids[k]) : sh.status();
    if (results[k].ok()) out[k] = std::move(sh).value();
  });
  for (const Status& st :
       results)  // the first failure in shard order, as a serial open would report
    if (!st.ok()) return st;
  return out;
}

Status StageShards(const format::Manifest& m, const format::Dictionary& dict,
                   const std::vector<std::unique_ptr<format::ShardFile>>& shards,
                   const std::string& local_root, const Options& opts, Stats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  UniqueFD root(::open(local_root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) return Status::FromErrno("local directory " + local_root, errno);
  // Directories first, on this thread: every parent of every staged file.
  FS_RETURN_IF_ERROR(MakeParentDirs(root.get(), local_root, shards));
  format::DecoderPool decoders(&dict);
  std::atomic<uint64_t> files{0}, raw{0}, read{0};
  std::vector<const format::ShardFile*> list;
  for (const auto& sh : shards) list.push_back(sh.get());
  Status st = format::ScanShards(
      m, list, opts.pool,
      [&](uint64_t n) {
        read += n;
        if (opts.on_read) opts.on_read(n);
      },
      opts.cancel,
      [&](const IndexEntry& e, std::string_view stored) -> Status {
        if (e.type != EntryType::kFile) return Status::OK();
        if (opts.cancel && opts.cancel->load()) return Status::Aborted("stage-in cancelled");
        std::string_view data;
        FS_RETURN_IF_ERROR(decoders.Get()->Decode(e, stored, nullptr, &data));
        FS_RETURN_IF_ERROR(WriteStaged(root.get(), local_root, e, data));
        files++;
        raw += e.size;
        if (opts.on_file) opts.on_file(e.size);
        return Status::OK();
      },
      [&](const IndexEntry& e, const format::DecodeFn& decode) -> Status {
        // A large file goes to disk as it is decoded: memory stays bounded whatever its size.
        if (opts.cancel && opts.cancel->load()) return Status::Aborted("stage-in cancelled");
        FS_RETURN_IF_ERROR(WriteStagedStream(root.get(), local_root, e, decode));
        files++;
        raw += e.size;
        if (opts.on_file) opts.on_file(e.size);
        return Status::OK();
      },
      &dict);
  if (!st.ok())
    return opts.cancel && opts.cancel->load() ? Status::Aborted("stage-in cancelled") : st;
  if (stats) {
    stats->shards = shards.size();
    stats->files = files;
    stats->raw_bytes = raw;
    stats->read_bytes = read;
    stats->seconds = SecondsSince(t0);
  }
  return Status::OK();
}

Status MakeParentDirs(int root_fd, const std::string& local_root,
                      const std::vector<std::unique_ptr<format::ShardFile>>& shards) {
  std::set<std::string_view> dirs;
  for (const auto& s : shards)
    for (const auto& e : s->entries) {
      if (e.type != EntryType::kFile) continue;
      size_t slash = e.path.rfind('/');
      if (slash != std::string::npos) dirs.insert(std::string_view(e.path).substr(0, slash));
    }
  for (std::string_view d : dirs) {
    Status st = MakeDirs(root_fd, std::string(d), 0700);
    if (!st.ok()) return st.Prefixed("local directory " + local_root);
  }
  return Status::OK();
}

Result<UniqueFD> CreateStaged(int root_fd, const std::string& local_root, const std::string& path) {
  // The local tree is private (0700) and holds no symlinks, so openat of the whole relative
  // path cannot escape local_root; O_NOFOLLOW|O_EXCL guard the leaf anyway.
  UniqueFD fd(
      ::openat(root_fd, path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
  if (!fd.valid()) return Status::FromErrno("create " + local_root + "/" + path, errno);
  return fd;
}

Status WriteStaged(int root_fd, const std::string& local_root, const IndexEntry& e,
                   std::string_view data) {
  auto fd = CreateStaged(root_fd, local_root, e.path);
  if (!fd.ok()) return fd.status();
  SparseWriter out(fd->get(), local_root + "/" + e.path);
  FS_RETURN_IF_ERROR(out.Write(data));
  return out.Finish();
}

Status WriteStagedStream(int root_fd, const std::string& local_root, const IndexEntry& e,
                         const format::DecodeFn& decode) {
  auto fd = CreateStaged(root_fd, local_root, e.path);
  if (!fd.ok()) return fd.status();
  SparseWriter out(fd->get(), local_root + "/" + e.path);
  FS_RETURN_IF_ERROR(decode([&](std::string_view piece) { return out.Write(piece); }));
  return out.Finish();
}

namespace {

// A remote file system answers each read after a round trip: several shards are read at once,
// in moderate chunks, to keep its pipeline full (4-6 x 256 KiB beat both 2 x 1 MiB and one
// sequential reader over sshfs; see docs/benchmarks.md, S2).
constexpr size_t kCopyChunk = 256u << 10, kCopyStreams = 6;

// Copies shards of a dataset as they are into a directory, one shard a call; calls may run at
// once.
class ShardCopier {
 public:
  ShardCopier(const std::string& dataset_dir, const format::Manifest& m,
              const format::Dictionary& dict, const std::string& copy_dir, int copy_fd,
              const Options& opts)
      : dataset_dir_(dataset_dir),
        m_(m),
        dict_(dict),
        copy_dir_(copy_dir),
        copy_fd_(copy_fd),
        opts_(opts) {}

  // Copies shard `id` to table::CopyName(id), checking its size and whole-shard hash.
  Status Copy(uint32_t id);
  bool Cancelled() const { return opts_.cancel && opts_.cancel->load(); }
  uint64_t read() const { return read_; }

 private:
  Status Damage(const std::string& src) const;

  const std::string& dataset_dir_;
  const format::Manifest& m_;
  const format::Dictionary& dict_;
  const std::string& copy_dir_;
  const int copy_fd_;
  const Options& opts_;
  std::atomic<uint64_t> read_{0};
};

Status ShardCopier::Copy(uint32_t id) {
  if (id >= m_.shards.size()) return Status::InvalidArgument("no shard " + std::to_string(id));
  const format::ShardRef& ref = m_.shards[id];
  const std::string name = table::CopyName(id);
  const std::string src = dataset_dir_ + "/" + ref.file, dst = copy_dir_ + "/" + name;
  if (Cancelled()) return Status::Aborted("stage-in cancelled");
  UniqueFD in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return Status::FromErrno("open " + src, errno);
  struct stat sst;
  if (::fstat(in.get(), &sst) != 0) return Status::FromErrno("stat " + src, errno);
  FS_RETURN_IF_ERROR(format::CheckShardSize(src, static_cast<uint64_t>(sst.st_size), ref));
  if (ref.bytes < format::kHeaderSize + format::kFooterSize)
    return Status::Corruption(src + ": truncated shard (" + std::to_string(ref.bytes) + " bytes)");
  UniqueFD out(
      ::openat(copy_fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
  if (!out.valid()) return Status::FromErrno("create " + dst, errno);
  std::unique_ptr<char[]> buf(new char[kCopyChunk]);
  Xxh3Stream hash;
  for (uint64_t off = 0; off < ref.bytes && !Cancelled();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kCopyChunk, ref.bytes - off));
    FS_RETURN_IF_ERROR(PreadFull(in.get(), buf.get(), n, off, src));
    FS_RETURN_IF_ERROR(WriteFull(out.get(), buf.get(), n, dst));
    hash.Update(buf.get(), n);
    off += n;
    read_ += n;
    if (opts_.on_read) opts_.on_read(n);
  }
  if (Cancelled()) return Status::Aborted("stage-in cancelled");
  return hash.Digest() == ref.xxh3 ? Status::OK() : Damage(src);
}

// A copy whose hash does not match: names the damage as a full scan of the source does (an
// error path: the shard is read again); failing that, the shard.
Status ShardCopier::Damage(const std::string& src) const {
  auto sh = format::OpenShard(src, m_.dataset_id);
  if (!sh.ok()) return sh.status();
  format::FrameDecoder dec(&dict_);
  FS_RETURN_IF_ERROR(format::ScanShards(
      m_, {sh->get()}, nullptr, nullptr, nullptr,
      [&](const IndexEntry& e, std::string_view stored) {
        std::string_view raw;
        return e.type == EntryType::kFile ? dec.Decode(e, stored, nullptr, &raw) : Status::OK();
      },
      [](const IndexEntry&, const format::DecodeFn&) { return Status::OK(); },
      &dict_));  // the scan decodes it
  return Status::Corruption(src + ": changed while it was copied (whole-shard checksum mismatch)");
}

}  // namespace

Status CopyShards(const std::string& dataset_dir, const format::Manifest& m,
                  const format::Dictionary& dict, const std::vector<uint32_t>& ids,
                  const std::string& copy_dir, const Options& opts, Stats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  UniqueFD dir(::open(copy_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return Status::FromErrno("local directory " + copy_dir, errno);
  ShardCopier copier(dataset_dir, m, dict, copy_dir, dir.get(), opts);
  std::vector<Status> results(ids.size());
  ParallelFor(ids.size(), std::min(kCopyStreams, ids.size()),
              [&](size_t k) { results[k] = copier.Copy(ids[k]); });
  for (const Status& st : results)
    if (!st.ok()) return copier.Cancelled() ? Status::Aborted("stage-in cancelled") : st;
  if (stats) {
    stats->shards = ids.size();
    stats->read_bytes = copier.read();
    stats->seconds = SecondsSince(t0);
  }
  return Status::OK();
}

Status UseCopies(std::vector<std::unique_ptr<format::ShardFile>>& shards,
                 const std::string& copy_dir) {
  for (auto& sh : shards) {
    const std::string path = copy_dir + "/" + table::CopyName(sh->header.shard_id);
    UniqueFD fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno("open " + path, errno);
    sh->fd = std::move(fd);
    sh->path = path;
  }
  return Status::OK();
}

}  // namespace fanstore::stage
