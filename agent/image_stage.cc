// The kernel-native read path (issue 31): this node's share written as one EROFS image
// (image/erofs.h) from the table and the local shards, and mounted read-only on the data root,
// instead of a file per dataset file (see agent.h).
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/io.h"
#include "common/log.h"
#include "common/text.h"
#include "image/dataset_image.h"
#include "image/mount.h"
#include "image/mount_service.h"

namespace fanstore::agent {
namespace {

constexpr char kImageDir[] = "/image";

// A step of a shard's digest in the blob (Agent::BlobShard): one file's size and its path's XXH3.
uint64_t BlobDigest(uint64_t digest, uint64_t size, uint64_t path_hash) {
  const uint64_t rec[2] = {size, path_hash};
  return XXH3_64bits_withSeed(rec, sizeof rec, digest);
}

Result<UniqueFD> CreateIn(const std::string& dir, const char* name) {
  UniqueFD fd(
      ::open((dir + "/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno("image: create " + dir + "/" + name, errno);
  return fd;
}

// A grandchild (reparented, never waited for) that holds `dir` open until the descriptor
// returned is closed, which the caller does once it has detached the mount on `dir`: the
// grandchild's close is then the last reference, and the kernel's cleanup of the file system
// runs in it. Only async-signal-safe calls after fork. An invalid descriptor when it cannot be
// had (the caller's detach then does the cleanup itself).
UniqueFD HandOffUnmountCleanup(const std::string& dir) {
  UniqueFD hold(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  int p[2];
  if (!hold.valid() || ::pipe2(p, O_CLOEXEC) != 0) return UniqueFD();
  const pid_t child = ::fork();
  if (child == 0) {
    if (::fork() != 0) ::_exit(0);
    ::prctl(PR_SET_NAME, "fanstore-umount");  // not an agent: `pgrep fanstore-agent` misses it
    // Nothing of the agent's but these two: not its lock, sockets or the job's output pipes,
    // which would otherwise stay open for as long as the cleanup runs.
    if (::dup2(p[0], 0) < 0 || ::dup2(hold.get(), 1) < 0) ::_exit(1);
    ::close_range(2, ~0U, 0);
    char c;
    while (::read(0, &c, 1) < 0 && errno == EINTR) {
    }
    ::close(1);  // the cleanup runs here
    ::_exit(0);
  }
  ::close(p[0]);
  if (child < 0) {
    ::close(p[1]);
    return UniqueFD();
  }
  int ws;
  while (::waitpid(child, &ws, 0) < 0 && errno == EINTR) {
  }
  return UniqueFD(p[1]);
}

}  // namespace

void Agent::ChooseImage() {
  image_ = false;
  if (cfg_.image == "no") return;
  std::string why;
  struct statfs fs;
  if (cfg_.image == "auto" && cfg_.unpack != "auto")
    why = "--unpack " + cfg_.unpack + " asks for files";
  else if (::geteuid() != 0 && cfg_.mount_service < 0)
    why = "mounting it needs root (or the plugin's mount service)";
  else if (::statfs(cfg_.local_dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC)
    why = "the local directory is tmpfs, from which the kernel mounts no EROFS image";
  if (why.empty()) {
    image_ = true;
    lazy_ = false;
  } else if (cfg_.image == "yes") {
    LOG_WARN("--image yes: no image: %s; unpacking the files", why.c_str());
  } else {
    LOG_DEBUG("no image: %s", why.c_str());
  }
}

Status Agent::StageImage(Shards* shards) {
  Status st = StageWait();  // the blob (WriteBlob), which set stage_seconds_
  const double blob_seconds = stage_seconds_;
  const auto t0 = std::chrono::steady_clock::now();
  if (st.ok()) st = WriteTreeAndMount();
  if (!st.ok() && !stop_requested_ && st.code() != Status::Code::kNoSpace) {
    // The kernel refused the image (no EROFS, no file-backed mounts before 6.12, a security
    // module): the files, as without it.
    LOG_WARN("image: %s; unpacking the files instead", st.ToString().c_str());
    UnmountImage();
    blob_fd_.Reset();
    (void)RemoveTree(cfg_.local_dir + kImageDir);
    image_ = false;
    staged_files_ = 0;
    staged_bytes_ = 0;
    read_bytes_ = 0;
    st = CheckInodes(share_inodes_);
    if (st.ok()) st = MakeDataDirs();
    for (auto& sh : *shards)  // the blob decoded them a shard at a time (WriteBlob)
      if (st.ok() && !sh->parsed()) st = format::ReadIndex(sh.get());
    if (st.ok()) st = Stage(shards);
  }
  stage_seconds_ = blob_seconds + SecondsSince(t0);
  return st;
}

void Agent::ForEachRemoteFile(const std::function<void(uint32_t, uint32_t)>& fn) const {
  for (uint32_t s = 0; s < index_.size(); s++)
    if (!local_shard_[s])
      for (uint32_t i = 0; i < index_.count(s); i++)
        if (index_.IsFile(s, i)) fn(s, i);
}

bool Agent::ImageTakesRemoteFiles() const {
  if (HoldsEveryShard()) return false;
  // What the cache would have had: the blob grows as files arrive, up to their sum, each in
  // blocks of 512 bytes (of 4 KiB past 2 TiB: ErofsImage::Options::block_bits).
  uint64_t need = 0, need_4k = 0;
  ForEachRemoteFile([&](uint32_t s, uint32_t i) {
    need += image::BlobExtent(index_.Size(s, i), 9);
    need_4k += image::BlobExtent(index_.Size(s, i), 12);
  });
  if (need > (uint64_t{2} << 40)) need = need_4k;
  if (need <= CacheCapacity()) return true;
  LOG_INFO("image: files of other nodes' shards (%s) go to the cache: the image may take %s",
           HumanBytes(need).c_str(), HumanBytes(CacheCapacity()).c_str());
  return false;
}

Status Agent::ForEachBlobFile(const std::function<void(uint32_t, uint64_t)>& fn) const {
  for (const BlobShard& b : blob_shards_) {
    uint64_t files = 0, digest = 0;
    bool regular = b.shard < index_.size();
    for (uint32_t i = 0; regular && i < index_.count(b.shard); i++) {
      if (!index_.IsFile(b.shard, i)) continue;
      const table::Entry& t = index_.Meta(b.shard, i);
      regular = table::IsReg(t) && !(t.flags & table::kHardLink);
      // The entry's own XXH3 of its path, as the table was built.
      digest = BlobDigest(digest, t.size, t.hash);
      files++;
      fn(index_.TableEntry(b.shard, i), t.size);
    }
    if (!regular || files != b.files || digest != b.digest)
      return Status::Corruption("image: the files of shard " + std::to_string(b.shard) +
                                " are not in the table as the blob has them");
  }
  return Status::OK();
}

Status Agent::WriteImageTree(int fd, bool with_remote, std::vector<uint64_t>* remote_extent,
                             uint64_t* blob_size) {
  // The image's tree: every directory and symlink of the table, this node's files and their
  // other names, and with_remote every other file too, breadth first, each directory's children
  // in the table's order, which is by name: the canonical order that root reads a tree in, one
  // node at a time, and refuses any other (ErofsImage::PlanSorted). Root plans the image from it
  // (image/mount.h); the agent plans nothing itself.
  const uint32_t n = view_.size();
  std::vector<uint32_t> node_of(n, image::kNone), entry_of;
  entry_of.reserve(n);
  entry_of.push_back(0);
  node_of[0] = 0;
  for (size_t k = 0; k < entry_of.size(); k++) {  // grows as it goes: the queue
    for (uint32_t c : view_.Children(view_.at(entry_of[k]))) {
      if (c >= n || node_of[c] != image::kNone) continue;  // a table of the agent's own: never
      const table::Entry& t = view_.Target(view_.at(c));
      if (!with_remote && table::IsReg(t) && !InLocalShard(t)) continue;
      node_of[c] = static_cast<uint32_t>(entry_of.size());
      entry_of.push_back(c);
    }
  }
  // The blob's order: this node's files as WriteBlob wrote them, shard by shard, each in its
  // index's order (shard s's entry i is table entry index_.TableEntry(s, i)); then the other
  // shards' files, each in the order in which a holder streams it. Each takes BlobExtent of its
  // size, as ErofsImage::Plan lays them out, so the plan has every file where the blob has it.
  std::vector<uint32_t> order;
  uint64_t next = 0, blocks9 = 0;
  auto place = [&](uint32_t te, uint64_t size) {
    order.push_back(node_of[te]);
    const uint64_t at = next;
    next += image::BlobExtent(size, blob_block_bits_);
    blocks9 += image::BlobExtent(size, 9) >> 9;
    return at;
  };
  FS_RETURN_IF_ERROR(ForEachBlobFile([&](uint32_t te, uint64_t size) { place(te, size); }));
  remote_extent->clear();
  if (with_remote) {
    remote_extent->assign(n, RemoteFiles::kNoExtent);
    ForEachRemoteFile([&](uint32_t s, uint32_t i) {
      const uint32_t te = index_.TableEntry(s, i);
      (*remote_extent)[te] = place(te, index_.Size(s, i));
    });
  }
  if (image::BlockBitsFor(blocks9) != blob_block_bits_)
    return Status::Unsupported("image: the tree's block size differs from the blob's");
  *blob_size = next;
  auto nodes = [&](const std::function<Status(const image::Node&)>& emit) {
    for (uint32_t i : entry_of) {
      const table::Entry& e = view_.at(i);
      image::Node x;
      x.parent = node_of[e.parent];
      x.name = i == 0 ? std::string_view() : view_.Name(e);
      x.mode = e.mode;
      x.mtime_ns = e.mtime_ns;
      if (e.flags & table::kHardLink) {
        x.link = node_of[e.aux];
        x.mode = S_IFREG | (view_.Target(e).mode & 07777);
      } else if (table::IsLink(e)) {
        x.target = view_.LinkTarget(e);
      } else if (table::IsReg(e)) {
        x.size = e.size;
      }
      FS_RETURN_IF_ERROR(emit(x));
    }
    return Status::OK();
  };
  return image::WriteTree(fd, nodes, order, next);
}

Status Agent::WriteBlob(const Shards& shards) {
  TestPause("staging");
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t size = 0, files = 0;  // DigestShards laid the shards out (blob_shards_)
  for (const BlobShard& b : blob_shards_) size += b.bytes, files += b.files;
  const std::string dir = cfg_.local_dir + kImageDir;
  if (::mkdir(dir.c_str(), 0700) != 0) return Status::FromErrno("image: create " + dir, errno);
  auto blob = CreateIn(dir, image::kBlobName);
  if (!blob.ok()) return blob.status();
  blob_fd_ = std::move(blob).value();
  image::BlobWriter out(blob_fd_.get(), uint32_t{1} << blob_block_bits_,
                        dir + "/" + image::kBlobName);
  FS_RETURN_IF_ERROR(out.Map(size, files));
  format::DecoderPool decoders(&dict_);
  std::vector<const format::ShardFile*> ptrs;
  for (const auto& sh : shards) ptrs.push_back(sh.get());
  stage_bytes_total_ = 0;
  for (const auto* sh : ptrs) stage_bytes_total_ += sh->size;
  // Each shard's index is decoded by the thread that writes its files, and released after: at
  // 14.2M names every index decoded at once took 2 GB (about 150 B a name) beside the table
  // being built, the agent's peak.
  auto scan = [&](size_t k, const format::ScanOptions& base) -> Status {
    const format::ShardFile& sh = *ptrs[k];
    BlobShard& b = blob_shards_[k];
    auto entries = format::ReadEntries(sh);
    if (!entries.ok()) return entries.status();
    // Each file's extent, in the order ErofsImage::Plan lays out the blob (WriteImageTree):
    // the index's, each file at the next block boundary.
    std::vector<uint64_t> offsets(entries->size());
    uint64_t next = b.start, n = 0, digest = 0;
    for (size_t i = 0; i < entries->size(); i++) {
      const format::IndexEntry& e = (*entries)[i];
      offsets[i] = next;
      if (e.type != format::EntryType::kFile) continue;
      next += image::BlobExtent(e.size, blob_block_bits_);
      n++;
      digest = BlobDigest(digest, e.size, Xxh3(e.path));
    }
    if (n != b.files || next - b.start != b.bytes)
      return Status::Corruption(sh.path + ": its index changed while this node staged it");
    b.digest = digest;
    const image::BlobWriter::Fill fill = out.Filler(&decoders, [&](const format::IndexEntry& e) {
      staged_files_++;
      staged_bytes_ += e.size;
      return offsets[static_cast<size_t>(&e - entries->data())];
    });
    format::ScanOptions so = base;
    so.entries = &*entries;
    so.stream = fill.large;
    return format::ScanShard(sh, so, fill.small);
  };
  FS_RETURN_IF_ERROR(format::ForEachShard(
      manifest_, ptrs, pool_.get(), [this](uint64_t b) { read_bytes_ += b; }, &stage_abort_, scan,
      nullptr, &dict_));
  FS_RETURN_IF_ERROR(out.FlushAll());
  stage_seconds_ = SecondsSince(t0);
  return Status::OK();
}

Status Agent::WriteTreeAndMount() {
  const bool with_remote = ImageTakesRemoteFiles();
  const std::string dir = cfg_.local_dir + kImageDir;
  const auto t0 = std::chrono::steady_clock::now();
  auto tree = CreateIn(dir, image::kTreeName);
  if (!tree.ok()) return tree.status();
  std::vector<uint64_t> remote_extent;
  uint64_t blob_size = 0;
  FS_RETURN_IF_ERROR(WriteImageTree(tree->get(), with_remote, &remote_extent, &blob_size));
  if (::ftruncate(blob_fd_.get(), static_cast<off_t>(blob_size)) != 0)
    return Status::FromErrno("image: size " + dir + "/" + image::kBlobName, errno);
  const auto t1 = std::chrono::steady_clock::now();
  FS_RETURN_IF_ERROR(MountImage(tree->get(), blob_fd_.get()));
  const auto t2 = std::chrono::steady_clock::now();
  LOG_INFO(
      "image: %s of data%s, mounted on %s (tree written in %.2f s, planned, its metadata "
      "written and mounted by root in %.2f s)",
      HumanBytes(blob_size).c_str(),
      with_remote ? " (other nodes' files to be fetched into it)" : "", data_root_.c_str(),
      std::chrono::duration<double>(t1 - t0).count(),
      std::chrono::duration<double>(t2 - t1).count());
  // Kept open: the warm walk drops the blob's pages behind it, and other nodes' files are
  // written into it as they arrive.
  image_blob_ = std::move(blob_fd_);
  if (with_remote) KeepRemoteFilesInImage(std::move(remote_extent));
  StartImageWarmer();
  return Status::OK();
}

void Agent::KeepRemoteFilesInImage(std::vector<uint64_t> extent) {
  image_extent_ = std::move(extent);
  RemoteFiles::ImageExtents x;
  x.blob = image_blob_.get();
  x.extent = [this](uint32_t s, uint32_t i) { return image_extent_[index_.TableEntry(s, i)]; };
  x.kept = [this](uint32_t s, uint32_t i) {
    return (table::EntryFlagsOf(index_.Meta(s, i)) & table::kLocal) != 0;
  };
  x.keep = [this](uint32_t s, uint32_t i) { alive_.MarkLocal(index_.TableEntry(s, i)); };
  x.open = [this](uint32_t s, uint32_t i) -> Result<int> {
    const int fd = ::openat(data_root_fd_.get(), std::string(index_.Path(s, i)).c_str(),
                            O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return Status::FromErrno("open " + std::string(index_.Path(s, i)), errno);
    return fd;
  };
  remote_.UseImage(std::move(x));
}

Status Agent::MountImage(int tree, int blob) {
  if (::geteuid() != 0) {
    // Under Slurm: the plugin's mount service, root, does root's side (image/mount_service.h).
    FS_RETURN_IF_ERROR(image::AskMount(cfg_.mount_service, tree, blob).Prefixed(data_root_));
  } else {
    // Root's side of the split (image/mount.h) here, as the service does it for an agent of
    // the job user's: the image planned from the tree file, its metadata written by the mounter.
    image::MountRequest req;
    req.tree_fd = tree;
    req.blob_fd = blob;
    req.owner = ::getuid();
    req.group = ::getgid();
    const std::string dir = cfg_.local_dir + kImageDir;
    UniqueFD meta_dir(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    UniqueFD target(::open(data_root_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!meta_dir.valid() || !target.valid())
      return Status::FromErrno("image: open " + dir + " and " + data_root_, errno);
    req.meta_dir_fd = meta_dir.get();
    req.target_fd = target.get();
    FS_RETURN_IF_ERROR(image::MountTree(req).Prefixed(data_root_));
  }
  image_mounted_ = true;
  data_root_fd_.Reset(::open(data_root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!data_root_fd_.valid()) return Status::FromErrno("open " + data_root_, errno);
  return Status::OK();
}

void Agent::StartImageWarmer() {
  if (stop_requested_) return;  // the stop's cleanup may be closing the descriptors it reads
  image_warmer_stop_ = false;
  // Reading a file of the image copies its bytes from the blob's pages into the file's own, so
  // that without more the node would hold its share twice in memory (beside the shards' pages
  // that the staging read). The walk reads this node's files ahead in the blob's order, up to
  // half the memory available, and drops the blob's pages behind it: then each file's first
  // read in the job finds its bytes in memory once, as a file per file would.
  uint64_t budget = 0;
  if (auto info = ReadSmallFile("/proc/meminfo", 1 << 16); info.ok())
    if (const size_t at = info->find("MemAvailable:"); at != std::string::npos)
      budget = std::strtoull(info->c_str() + at + 13, nullptr, 10) * 1024 / 2;
  try {
    image_warmer_ = std::thread([this, budget]() mutable {
      LowerThreadPriority();
      const int root = data_root_fd_.get();
      const int blob = image_blob_.get();
      const auto t0 = std::chrono::steady_clock::now();
      uint64_t read = 0, off = 0, mark = 0, dropped = 0;
      auto drop = [&](uint64_t from, uint64_t to) {  // a hint: dirty pages stay
        if (to > from)
          (void)::posix_fadvise(blob, static_cast<off_t>(from), static_cast<off_t>(to - from),
                                POSIX_FADV_DONTNEED);
      };
      auto stopped = [this] { return image_warmer_stop_.load(std::memory_order_relaxed); };
      constexpr uint64_t kWindow = uint64_t{64} << 20, kChunk = uint64_t{128} << 10;
      // The blob's order (WriteImageTree): this node's shards, each in its index's order. Never
      // a file of another node's shards: its extent is written as it arrives.
      bool full = false;
      for (size_t k = 0; k < mine_.size() && !full && !stopped(); k++) {
        const uint32_t s = mine_[k];
        for (uint32_t i = 0; i < index_.count(s) && !stopped(); i++) {
          if (!index_.IsFile(s, i)) continue;
          const uint64_t size = index_.Size(s, i);
          if (size > budget) {  // the rest of the blob stays as it is
            full = true;
            break;
          }
          UniqueFD fd(::openat(root, std::string(index_.Path(s, i)).c_str(),
                               O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
          // readahead(2) reads at most the mount's readahead window (128 KiB) a call.
          for (uint64_t at = 0; fd.valid() && at < size && !stopped(); at += kChunk)
            if (::readahead(fd.get(), static_cast<off_t>(at), kChunk) != 0) break;
          budget -= size;
          read += size;
          off += image::BlobExtent(size, blob_block_bits_);
          if (off - mark >= kWindow) {  // one window behind: its reads are done
            drop(dropped, mark);
            dropped = mark;
            mark = off;
          }
        }
      }
      // Again, written back first, for the pages that were dirty the first time; a window at a
      // time, so that the job's end never waits for more than one.
      for (uint64_t at = 0; at < off && !stopped(); at += kWindow) {
        const uint64_t len = std::min(kWindow, off - at);
        (void)::sync_file_range(
            blob, static_cast<off_t>(at), static_cast<off_t>(len),
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        drop(at, at + len);
      }
      // Then every name the reads did not look up, in the table's order.
      uint32_t i = 1;
      struct stat st;
      for (; i < view_.size() && !stopped(); i++) {
        const table::Entry& e = view_.at(i);
        if (full || !table::IsReg(e) || (table::EntryFlagsOf(e) & table::kHardLink) ||
            !InLocalShard(e))
          (void)::fstatat(root, std::string(view_.Path(e)).c_str(), &st, AT_SYMLINK_NOFOLLOW);
      }
      LOG_INFO("image: read %s ahead and looked up %u names in %.1f s", HumanBytes(read).c_str(),
               i - 1, SecondsSince(t0));
    });
  } catch (const std::system_error&) {  // no thread to be had: the job's opens build them
  }
}

void Agent::UnmountImage() {
  if (image_warmer_.joinable()) {
    image_warmer_stop_ = true;
    image_warmer_.join();
  }
  if (!image_mounted_) return;
  data_root_fd_.Reset();
  image_blob_.Reset();
  // Detached at once, never busy. The kernel then frees every inode and dentry of the image
  // (about 6-10 s for 1.33M files, one core) when the last reference goes: here a detached
  // grandchild's descriptor, so that the job's end does not wait for it. Nothing stays visible.
  image_mounted_ = false;
  if (::geteuid() != 0) {  // the service detaches it, and the kernel's cleanup runs there
    Status st = image::AskUnmount(cfg_.mount_service);
    if (!st.ok()) LOG_ERROR("image: unmount %s: %s", data_root_.c_str(), st.ToString().c_str());
    return;
  }
  UniqueFD release = HandOffUnmountCleanup(data_root_);
  if (::umount2(data_root_.c_str(), MNT_DETACH) != 0)
    LOG_ERROR("image: unmount %s: %s", data_root_.c_str(), std::strerror(errno));
}

}  // namespace fanstore::agent
