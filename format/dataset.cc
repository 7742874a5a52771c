// Dataset: open, verify and extract.
#include "format/dataset.h"

#include <sys/xattr.h>

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
#include "common/io.h"
#include "common/path.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"
#include "common/xattrs.h"

namespace fanstore::format {

Result<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir_in) {
  const std::string dir = TrimTrailingSlashes(dir_in);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("dataset " + dir + " does not exist");
    return Status::FromErrno("dataset " + dir, errno);
  }
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(dir + " is not a FanStore dataset (not a directory)");
  auto ds = std::make_unique<Dataset>();
  ds->dir_ = dir;
  auto m = LoadManifest(dir);
  if (!m.ok()) return m.status();
  ds->manifest_ = std::move(m).value();
  FS_RETURN_IF_ERROR(ds->dict_.Load(dir, ds->manifest_.dict));
  FS_RETURN_IF_ERROR(ds->OpenShards());
  FS_RETURN_IF_ERROR(ds->CheckParents());
  FS_RETURN_IF_ERROR(ds->CheckLinks());
  return ds;
}

Status Dataset::OpenShards() {
  // Footers and indexes are read and parsed in parallel (on a parallel file system each costs
  // round trips); the checks then run in shard order, so the error reported does not depend
  // on timing.
  const size_t n = manifest_.shards.size();
  std::vector<Result<std::unique_ptr<ShardFile>>> opened;
  opened.reserve(n);
  for (size_t i = 0; i < n; i++) opened.emplace_back(Status::Aborted("not opened"));
  ParallelFor(n, std::min<size_t>(8, ThreadPool::DefaultThreads() * 2), [&](size_t i) {
    opened[i] = OpenShard(dir_ + "/" + manifest_.shards[i].file, manifest_.dataset_id);
  });
  size_t total_entries = 0;
  for (auto& sh : opened)
    if (sh.ok()) total_entries += (*sh)->entries.size();
  by_path_.reserve(total_entries);
  for (size_t i = 0; i < n; i++) {
    const ShardRef& ref = manifest_.shards[i];
    auto& sh = opened[i];
    if (!sh.ok()) return sh.status();
    FS_RETURN_IF_ERROR(CheckAgainstManifest(**sh, ref, static_cast<uint32_t>(i)));
    for (uint32_t j = 0; j < (*sh)->entries.size(); j++) {
      const auto& e = (*sh)->entries[j];
      if (e.codec == Codec::kZstdDict && !dict_.ddict())
        return Status::Corruption(dir_ + "/" + ref.file + ": file '" + e.path +
                                  "' needs a dictionary the manifest does not list");
      if (!by_path_.emplace(e.path, Ref{static_cast<uint32_t>(i), j}).second)
        return Status::Corruption(dir_ + "/" + ref.file + ": path '" + e.path +
                                  "' appears twice in the dataset");
    }
    shards_.push_back(std::move(sh).value());
  }
  return Status::OK();
}

Status Dataset::CheckParents() const {
  for (const auto& [path, r] : by_path_) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) continue;
    auto parent = by_path_.find(std::string_view(path).substr(0, slash));
    if (parent == by_path_.end() ||
        shards_[parent->second.shard]->entries[parent->second.entry].type != EntryType::kDir)
      return Status::Corruption(dir_ + "/" + manifest_.shards[r.shard].file + ": '" + path +
                                "' has no parent directory entry");
  }
  return Status::OK();
}

Status Dataset::CheckLinks() const {
  // Symlinks must stay inside when resolved through each other, not only each on its own:
  // `x/esc -> up/../..` with `x/up -> .` leaves the root. Targets are tiny frames in shard 0.
  struct Link {
    size_t shard;
    const IndexEntry* e;
    std::string target;
  };
  std::vector<Link> links;
  std::unordered_map<std::string_view, size_t> link_of;
  FrameDecoder dec(&dict_);
  for (size_t i = 0; i < shards_.size(); i++)
    for (const auto& e : shards_[i]->entries) {
      if (e.type != EntryType::kSymlink && e.type != EntryType::kHardLink) continue;
      std::string target;
      FS_RETURN_IF_ERROR(ReadEntry(*shards_[i], e, &dec, &target));
      if (e.type == EntryType::kHardLink) {  // another name of a file of the dataset
        const IndexEntry* t = Find(target);
        if (!t || t->type != EntryType::kFile)
          return Status::Corruption(shards_[i]->path + ": hard link '" + e.path + "' to '" +
                                    target + "', which is not a file of the dataset");
        continue;
      }
      links.push_back({i, &e, std::move(target)});
    }
  for (size_t k = 0; k < links.size(); k++) link_of.emplace(links[k].e->path, k);
  const LookupFn lookup = [&](const std::string& p, std::string* target) {
    const IndexEntry* e = Find(p);
    if (!e || e->type == EntryType::kFile || e->type == EntryType::kHardLink)
      return NodeKind::kOther;
    if (e->type == EntryType::kDir) return NodeKind::kDir;
    *target = links[link_of.at(e->path)].target;
    return NodeKind::kLink;
  };
  for (const Link& l : links)
    if (!LinkStaysInside(l.e->path, l.target, lookup))
      return Status::Corruption(shards_[l.shard]->path + ": symlink '" + l.e->path + "' -> '" +
                                l.target + "' leads outside the dataset through its symlinks");
  return Status::OK();
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

}  // namespace

Status ScanAll(const Dataset& ds, size_t threads, const ProgressFn& progress, const FrameFn& fn,
               const StreamFn& stream) {
  ThreadPool pool(threads ? threads : ThreadPool::DefaultThreads());
  const uint64_t total = TotalBytes(ds);
  uint64_t files_total = 0;
  std::vector<const ShardFile*> shards;
  for (size_t i = 0; i < ds.shard_count(); i++) {
    shards.push_back(&ds.shard(i));
    for (const auto& e : ds.shard(i).entries) files_total += e.type == EntryType::kFile;
  }
  std::atomic<uint64_t> done{0}, files{0};
  std::mutex progress_mu;
  auto report = [&](uint64_t bytes) {
    if (!progress) return;
    std::lock_guard<std::mutex> l(progress_mu);
    progress(bytes, total, files.load(), files_total);
  };
  // Files are counted as their frames are handled (by either path).
  auto counted = [&](const IndexEntry& e, std::string_view stored) {
    Status st = fn(e, stored);
    if (st.ok() && e.type == EntryType::kFile) files++;
    return st;
  };
  auto counted_stream = [&](const IndexEntry& e, const DecodeFn& decode) {
    Status st = stream(e, decode);
    if (st.ok()) files++;
    return st;
  };
  Status st = ScanShards(
      ds.manifest(), shards, &pool, [&](uint64_t bytes) { report(done.fetch_add(bytes) + bytes); },
      nullptr, counted, counted_stream, &ds.dict());
  if (st.ok()) report(done.load());  // the last files, counted after the last read
  return st;
}

Result<UniqueFD> OpenEmptyDest(const std::string& dest) {
  if (::mkdir(dest.c_str(), 0700) != 0) {
    if (errno != EEXIST) return Status::FromErrno("create " + dest, errno);
    UniqueFD probe(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!probe.valid()) return Status::FromErrno("open " + dest, errno);
    DIR* d = ::fdopendir(probe.Release());
    int count = 0;
    while (struct dirent* de = ::readdir(d))
      count += std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, "..");
    ::closedir(d);
    if (count) return Status::InvalidArgument(dest + " exists and is not empty");
  }
  UniqueFD root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return Status::FromErrno("open " + dest, errno);
  return root;
}

Status Verify(const Dataset& ds, const VerifyOptions& opts) {
  DecoderPool decoders(&ds.dict());
  return ScanAll(
      ds, opts.threads, opts.progress,
      [&](const IndexEntry& e, std::string_view stored) {
        std::string_view raw;
        return decoders.Get()->Decode(e, stored, nullptr, &raw);
      },
      [](const IndexEntry&, const DecodeFn&) { return Status::OK(); });  // the scan decodes it
}

namespace {

Status SetTimes(int dirfd, const std::string& leaf, int64_t mtime_ns, bool nofollow,
                const std::string& what) {
  struct timespec ts[2];
  ts[0].tv_sec = 0;
  ts[0].tv_nsec = UTIME_OMIT;
  ts[1].tv_sec = mtime_ns / 1000000000;
  ts[1].tv_nsec = mtime_ns % 1000000000;
  if (::utimensat(dirfd, leaf.c_str(), ts, nofollow ? AT_SYMLINK_NOFOLLOW : 0) != 0)
    return Status::FromErrno("set time of " + what, errno);
  return Status::OK();
}

// The dataset's extended attributes of a file or directory, on its new copy (before its mode
// may take away the write permission that setting them needs).
Status SetXattrs(int fd, std::string_view enc, const std::string& what) {
  for (const auto& [name, value] : xattrs::Decode(enc)) {
    const std::string n(name);
    if (::fsetxattr(fd, n.c_str(), value.data(), value.size(), 0) != 0)
      return Status::FromErrno("set extended attribute " + n + " of " + what +
                                   (errno == ENOTSUP ? " (the file system keeps none)" : ""),
                               errno);
  }
  return Status::OK();
}

// File content, decoded and verified on all cores while the shards stream in.
Status ExtractFiles(const Dataset& ds, int root, const std::string& dest,
                    const ExtractOptions& opts) {
  DecoderPool decoders(&ds.dict());
  // Extracted files are the extracting user's: never setuid or setgid (a dataset could plant
  // a setuid copy of a program in DEST), and the sticky bit means nothing on a file.
  auto finish = [&](int fd, const IndexEntry& e) -> Status {
    FS_RETURN_IF_ERROR(SetXattrs(fd, e.Xattrs(), dest + "/" + e.path));
    if (::fchmod(fd, e.mode & 0777) != 0) return Status::FromErrno("chmod " + e.path, errno);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {e.mtime_ns / 1000000000, e.mtime_ns % 1000000000}};
    if (::futimens(fd, ts) != 0) return Status::FromErrno("set time of " + e.path, errno);
    return Status::OK();
  };
  auto create = [&](const IndexEntry& e) -> Result<UniqueFD> {
    std::string leaf;
    auto parent = OpenParentDir(root, e.path, &leaf);
    if (!parent.ok()) return parent.status();
    UniqueFD fd(::openat(parent->get(), leaf.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return Status::FromErrno("create " + dest + "/" + e.path, errno);
    return fd;
  };
  auto small = [&](const IndexEntry& e, std::string_view stored) -> Status {
    if (e.type != EntryType::kFile) return Status::OK();
    std::string_view raw;
    FS_RETURN_IF_ERROR(decoders.Get()->Decode(e, stored, nullptr, &raw));
    auto fd = create(e);
    if (!fd.ok()) return fd.status();
    SparseWriter out(fd->get(), dest + "/" + e.path);
    FS_RETURN_IF_ERROR(out.Write(raw));
    FS_RETURN_IF_ERROR(out.Finish());
    return finish(fd->get(), e);
  };
  auto large = [&](const IndexEntry& e, const DecodeFn& decode) -> Status {
    // A large file is written as it is decoded, in bounded memory.
    auto fd = create(e);
    if (!fd.ok()) return fd.status();
    SparseWriter out(fd->get(), dest + "/" + e.path);
    FS_RETURN_IF_ERROR(decode([&](std::string_view piece) { return out.Write(piece); }));
    FS_RETURN_IF_ERROR(out.Finish());
    return finish(fd->get(), e);
  };
  return ScanAll(ds, opts.threads, opts.progress, small, large);
}

// Hard links and symlinks, after every file, so none can redirect a write.
Status ExtractLinks(const Dataset& ds, int root, const std::string& dest,
                    const std::vector<const IndexEntry*>& entries) {
  FrameDecoder dec(&ds.dict());
  for (const IndexEntry* e : entries) {
    if (e->type != EntryType::kSymlink && e->type != EntryType::kHardLink) continue;
    Dataset::Ref ref;
    ds.Find(e->path, &ref);
    std::string target;
    FS_RETURN_IF_ERROR(ReadEntry(ds.shard(ref.shard), *e, &dec, &target));
    std::string leaf;
    auto parent = OpenParentDir(root, e->path, &leaf);
    if (!parent.ok()) return parent.status();
    if (e->type == EntryType::kHardLink) {  // the file, extracted already, under this name too
      std::string target_leaf;
      auto target_parent = OpenParentDir(root, target, &target_leaf);
      if (!target_parent.ok()) return target_parent.status();
      if (::linkat(target_parent->get(), target_leaf.c_str(), parent->get(), leaf.c_str(), 0) != 0)
        return Status::FromErrno("create hard link " + dest + "/" + e->path, errno);
      continue;
    }
    if (::symlinkat(target.c_str(), parent->get(), leaf.c_str()) != 0)
      return Status::FromErrno("create symlink " + dest + "/" + e->path, errno);
    FS_RETURN_IF_ERROR(SetTimes(parent->get(), leaf, e->mtime_ns, true, e->path));
  }
  return Status::OK();
}

// Directory modes and times, deepest first so that children do not disturb parents; the root's
// last.
Status FinishDirs(const Dataset& ds, int root, const std::string& dest,
                  const std::vector<const IndexEntry*>& entries) {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const IndexEntry* e = *it;
    if (e->type != EntryType::kDir) continue;
    std::string leaf;
    auto parent = OpenParentDir(root, e->path, &leaf);
    if (!parent.ok()) return parent.status();
    if (!e->Xattrs().empty()) {
      UniqueFD dir(
          ::openat(parent->get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dir.valid()) return Status::FromErrno("open " + dest + "/" + e->path, errno);
      FS_RETURN_IF_ERROR(SetXattrs(dir.get(), e->Xattrs(), dest + "/" + e->path));
    }
    if (::fchmodat(parent->get(), leaf.c_str(), e->mode & 01777, 0) != 0)
      return Status::FromErrno("chmod " + e->path, errno);
    FS_RETURN_IF_ERROR(SetTimes(parent->get(), leaf, e->mtime_ns, false, e->path));
  }
  const Manifest& m = ds.manifest();
  FS_RETURN_IF_ERROR(SetXattrs(root, m.root_xattrs, dest));
  if (::fchmod(root, m.root_mode & 01777) != 0) return Status::FromErrno("chmod " + dest, errno);
  struct timespec ts[2] = {{0, UTIME_OMIT},
                           {m.root_mtime_ns / 1000000000, m.root_mtime_ns % 1000000000}};
  if (::futimens(root, ts) != 0) return Status::FromErrno("set time of " + dest, errno);
  return Status::OK();
}

}  // namespace

Status Extract(const Dataset& ds, const std::string& dest, const ExtractOptions& opts) {
  auto root = OpenEmptyDest(dest);
  if (!root.ok()) return root.status();
  const auto entries = ds.SortedEntries();
  // Directories first, owner-writable for now: final modes are applied last.
  for (const IndexEntry* e : entries) {
    if (e->type != EntryType::kDir) continue;
    std::string leaf;
    auto parent = OpenParentDir(root->get(), e->path, &leaf);
    if (!parent.ok()) return parent.status();
    if (::mkdirat(parent->get(), leaf.c_str(), 0700) != 0)
      return Status::FromErrno("create directory " + dest + "/" + e->path, errno);
  }
  FS_RETURN_IF_ERROR(ExtractFiles(ds, root->get(), dest, opts));
  FS_RETURN_IF_ERROR(ExtractLinks(ds, root->get(), dest, entries));
  return FinishDirs(ds, root->get(), dest, entries);
}

}  // namespace fanstore::format
