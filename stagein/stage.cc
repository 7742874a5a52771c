// Stage-in: sequential shard reads, parallel decode + verify + write.
#include "stagein/stage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/hash.h"
#include "common/unique_fd.h"
#include "stagein/io.h"
#include "stagein/thread_pool.h"

namespace fanstore::stage {

using format::EntryType;
using format::IndexEntry;

Result<std::vector<std::unique_ptr<format::ShardFile>>> OpenShards(const std::string& dataset_dir,
                                                                  const format::Manifest& m,
                                                                  const std::vector<uint32_t>& ids) {
  std::vector<std::unique_ptr<format::ShardFile>> out;
  for (uint32_t id : ids) {
    if (id >= m.shards.size()) return Status::InvalidArgument("no shard " + std::to_string(id));
    const auto& ref = m.shards[id];
    auto sh = format::OpenShard(dataset_dir + "/" + ref.file, m.dataset_id);
    if (!sh.ok()) return sh.status();
    if ((*sh)->size != ref.bytes)
      return Status::Corruption(dataset_dir + "/" + ref.file + ": size " + std::to_string((*sh)->size) +
                                " differs from the manifest's " + std::to_string(ref.bytes) + " (truncated?)");
    if ((*sh)->header.shard_id != id)
      return Status::Corruption(dataset_dir + "/" + ref.file + ": holds shard id " +
                                std::to_string((*sh)->header.shard_id) + ", expected " + std::to_string(id));
    out.push_back(std::move(sh).value());
  }
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
  Status st = format::ScanShards(m, list, opts.pool, [&](uint64_t n) {
    read += n;
    if (opts.on_read) opts.on_read(n);
  }, opts.cancel, [&](const IndexEntry& e, std::string_view stored) -> Status {
    if (e.type != EntryType::kFile) return Status::OK();
    if (opts.cancel && opts.cancel->load()) return Status::Aborted("stage-in cancelled");
    std::string_view data;
    FS_RETURN_IF_ERROR(decoders.Get()->Decode(e, stored, nullptr, &data));
    FS_RETURN_IF_ERROR(WriteStaged(root.get(), local_root, e, data));
    files++;
    raw += e.size;
    return Status::OK();
  });
  if (!st.ok()) return opts.cancel && opts.cancel->load() ? Status::Aborted("stage-in cancelled") : st;
  if (stats) {
    stats->shards = shards.size();
    stats->files = files;
    stats->raw_bytes = raw;
    stats->read_bytes = read;
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  UniqueFD fd(::openat(root_fd, path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
  if (!fd.valid()) return Status::FromErrno("create " + local_root + "/" + path, errno);
  return fd;
}

Status WriteStaged(int root_fd, const std::string& local_root, const IndexEntry& e, std::string_view data) {
  auto fd = CreateStaged(root_fd, local_root, e.path);
  if (!fd.ok()) return fd.status();
  return WriteFull(fd->get(), data.data(), data.size(), local_root + "/" + e.path);
}

Status CopyShards(const format::Manifest& m, const format::Dictionary& dict,
                  std::vector<std::unique_ptr<format::ShardFile>>& shards, const std::string& copy_dir,
                  const Options& opts, Stats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  UniqueFD dir(::open(copy_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return Status::FromErrno("local directory " + copy_dir, errno);
  constexpr size_t kChunk = 1u << 20;
  std::vector<Status> results(shards.size());
  std::atomic<uint64_t> read{0};
  auto cancelled = [&] { return opts.cancel && opts.cancel->load(); };
  ParallelFor(shards.size(), opts.pool ? opts.pool->size() : 1, [&](size_t k) {
    format::ShardFile& sh = *shards[k];
    const format::ShardRef& ref = m.shards[sh.header.shard_id];  // ids checked at open
    const std::string dst = copy_dir + "/" + ref.file;
    Status& st = results[k];
    if (cancelled()) {
      st = Status::Aborted("stage-in cancelled");
      return;
    }
    UniqueFD out(::openat(dir.get(), ref.file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
    if (!out.valid()) {
      st = Status::FromErrno("create " + dst, errno);
      return;
    }
    auto buf = std::make_unique<char[]>(kChunk);
    Xxh3Stream hash;
    for (uint64_t off = 0; off < sh.size && st.ok() && !cancelled();) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, sh.size - off));
      st = PreadFull(sh.fd.get(), buf.get(), n, off, sh.path);
      if (!st.ok()) break;
      hash.Update(buf.get(), n);
      st = WriteFull(out.get(), buf.get(), n, dst);
      off += n;
      read += n;
      if (opts.on_read) opts.on_read(n);
    }
    if (st.ok() && cancelled()) st = Status::Aborted("stage-in cancelled");
    if (!st.ok()) return;
    if (hash.Digest() != ref.xxh3) {
      // Name the damage as a full scan of the source would; failing that, the shard.
      format::FrameDecoder dec(&dict);
      st = format::ScanShards(m, {&sh}, nullptr, nullptr, nullptr, [&](const IndexEntry& e, std::string_view stored) {
        std::string_view raw;
        return e.type == EntryType::kFile ? dec.Decode(e, stored, nullptr, &raw) : Status::OK();
      });
      if (st.ok()) st = Status::Corruption(sh.path + ": changed while it was copied (whole-shard checksum mismatch)");
      return;
    }
    sh.fd = std::move(out);
    sh.path = dst;
  });
  for (const Status& st : results)
    if (!st.ok()) return cancelled() ? Status::Aborted("stage-in cancelled") : st;
  if (stats) {
    stats->shards = shards.size();
    stats->read_bytes = read;
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return Status::OK();
}

}  // namespace fanstore::stage
