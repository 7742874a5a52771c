// Staging: the space check, the unpack mode, and the staging thread (see agent.h).
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"
#include "common/remove_tree.h"
#include "common/text.h"
#include "image/erofs.h"
#include "stage/stage.h"

namespace fanstore::agent {

using format::EntryType;

Status Agent::ChooseUnpack() {
  // Free space is measured once, before anything is written: the copy may run while the
  // exact check (PlanStage) is made.
  struct statvfs vfs;
  const bool measured = ::statvfs(cfg_.local_dir.c_str(), &vfs) == 0;
  free_bytes_ = measured ? static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize : UINT64_MAX;
  // A file system without an inode limit (tmpfs with nr_inodes=0) reports no inodes at all.
  free_inodes_ = measured && vfs.f_files > 0 ? static_cast<uint64_t>(vfs.f_favail) : UINT64_MAX;
  ChooseImage();
  if (image_) return Status::OK();  // written once the table is built (StageImage)
  // Lazy unpack pays off where creating many small files, not reading the source, bounds
  // stage-in. It is decided from the manifest, so that the copy starts at once. It needs room
  // for the shard copies and the files side by side until the background unpack is done;
  // this node's files are not known before its indexes are read, so they are estimated from
  // its share of the stored bytes here, and checked exactly in PlanStage.
  constexpr uint64_t kLazyMeanFileSize = 64 << 10;
  const format::Manifest& m = manifest_;
  lazy_ = cfg_.unpack == "lazy" ||
          (cfg_.unpack == "auto" && m.files > 0 && m.raw_bytes / m.files < kLazyMeanFileSize);
  if (!lazy_) return Status::OK();
  uint64_t stored = 0;
  for (uint32_t s : mine_) stored += m.shards[s].bytes;
  const uint64_t files_estimate =
      m.stored_bytes
          ? static_cast<uint64_t>(static_cast<long double>(m.raw_bytes) * stored / m.stored_bytes)
          : m.raw_bytes;
  if (files_estimate + stored > free_bytes_) {
    lazy_ = false;
    if (cfg_.unpack == "lazy")
      LOG_WARN(
          "--unpack lazy needs about %s for this node's shard copies and files; unpacking eagerly",
          HumanBytes(files_estimate + stored).c_str());
    return Status::OK();
  }
  copy_dir_ = cfg_.local_dir + "/" + table::kCopyDir;
  if (::mkdir(copy_dir_.c_str(), 0700) != 0)
    return Status::FromErrno("local directory: create " + copy_dir_, errno);
  return Status::OK();
}

// Lazy unpack copies the shards as they are: that needs only the manifest and starts at once.
// Meanwhile this node's shards are opened (their indexes read) and the share checked against
// the free space; eager unpack needs the indexes and starts after.
Status Agent::OpenAndPlan(Result<Shards>* shards) {
  WriteStatus(AgentState::kStaging, "");
  FS_RETURN_IF_ERROR(MakeRoomForShards());
  FS_RETURN_IF_ERROR(ChooseUnpack());
  if (lazy_) FS_RETURN_IF_ERROR(StageAsync(nullptr));
  // Eager unpack stages from the entries: parsed here, several shards at once. The image's blob
  // decodes each shard's index as it writes it (WriteBlob).
  *shards = stage::OpenShards(cfg_.dataset, manifest_, mine_, /*parse=*/!lazy_ && !image_);
  if (!shards->ok()) return shards->status();
  Share share;
  FS_RETURN_IF_ERROR(DigestShards(**shards, &share));
  bool lazy_fits = true;
  FS_RETURN_IF_ERROR(PlanStage(**shards, share, &lazy_fits));
  WriteStatus(AgentState::kStaging, "");  // with the totals now known
  if (lazy_fits) return Status::OK();
  // The estimate let the copy start, the exact share does not fit beside it: unpack eagerly.
  LOG_WARN("this node's shard copies and files do not fit side by side in %s; unpacking eagerly",
           cfg_.local_dir.c_str());
  stage_abort_ = true;
  (void)StageWait();
  stage_abort_ = stop_requested_.load();
  read_bytes_ = 0;
  lazy_ = false;
  return RemoveTree(copy_dir_);
}

// Descriptors the agent keeps beside its shards': sockets of peers and clients, the cache's and
// the image's files, the table, pipes.
constexpr rlim_t kOwnDescriptors = 512;

// Every shard of the share stays open while the agent serves (its raw frames, its peers): a node
// that holds a thousand shards needs more than the usual soft limit of 1,024 descriptors. The
// soft limit is raised as far as that needs and the hard limit allows; past the hard one, a
// clear error before any shard is opened.
Status Agent::MakeRoomForShards() const {
  const rlim_t need = mine_.size() + kOwnDescriptors;
  const OpenFileLimit lim = RaiseOpenFileLimit(need);
  if (lim.soft != RLIM_INFINITY && lim.soft < need)
    return Status::NoSpace("this node's share of the dataset is " + std::to_string(mine_.size()) +
                           " shards, each kept open, and the open-file limit is " +
                           std::to_string(lim.hard) + " (ulimit -Hn); it needs " +
                           std::to_string(need) +
                           ": raise nofile (limits.conf, and LimitNOFILE= of slurmd.service)");
  if (lim.soft != lim.was)
    LOG_INFO("open-file limit raised from %llu to %llu for %zu shards",
             static_cast<unsigned long long>(lim.was), static_cast<unsigned long long>(lim.soft),
             mine_.size());
  return Status::OK();
}

// Inodes kept free beyond the share: the cache's files, the table's temporary, status.json.
constexpr uint64_t kSpareInodes = 64;

Status Agent::DigestShards(const Shards& shards, Share* share) {
  own_links_.assign(manifest_.shards.size(), {});
  format::FrameDecoder dec(&dict_);
  // The image's blob: 512-byte blocks unless the dataset's files could take 2^32 of them, as
  // ErofsImage::Plan chooses for the tree (WriteImageTree checks that it will); each shard's
  // files one after another, each at a block boundary.
  blob_block_bits_ = image::BlockBitsFor(manifest_.raw_bytes / 512 + manifest_.files);
  blob_shards_.clear();
  uint64_t blob_next = 0;
  for (const auto& sh : shards) {
    exchange::Links& links = own_links_[sh->header.shard_id];
    BlobShard& blob = blob_shards_.emplace_back();
    blob.shard = sh->header.shard_id;
    blob.start = blob_next;
    auto digest = [&](const format::IndexEntry& e) -> Status {
      share->entries++;
      if (e.type == EntryType::kFile) {
        share->files++, share->bytes += e.size;
        blob.files++;
        blob.bytes += image::BlobExtent(e.size, blob_block_bits_);
      }
      if (e.type != EntryType::kSymlink && e.type != EntryType::kHardLink) return Status::OK();
      std::string target;
      FS_RETURN_IF_ERROR(format::ReadEntry(*sh, e, &dec, &target));
      links.emplace_back(e.path, std::move(target));
      return Status::OK();
    };
    // The entries when OpenShards parsed them (eager), else the index decoded once more.
    Status st;
    if (sh->parsed()) {
      for (const auto& e : sh->entries)
        if (st = digest(e); !st.ok()) break;
    } else {
      st = format::ForEachIndexEntry(sh->index_stored, sh->footer, digest);
    }
    if (!st.ok()) return st.Prefixed(sh->path);
    blob_next += blob.bytes;
  }
  return Status::OK();
}

std::string Agent::ShareWords() const {
  return "this node's share of the dataset (" + std::to_string(mine_.size()) + " of " +
         std::to_string(manifest_.shards.size()) + " shards) needs ";
}

Status Agent::CheckInodes(uint64_t inodes) const {
  if (inodes <= free_inodes_) return Status::OK();
  return Status::NoSpace("local directory " + cfg_.local_dir + " has " +
                         std::to_string(free_inodes_) + " free inodes; " + ShareWords() +
                         std::to_string(inodes));
}

Status Agent::PlanStage(const Shards& shards, const Share& totals, bool* lazy_fits) {
  const uint64_t need = totals.bytes, files = totals.files;
  uint64_t stored = 0;
  for (const auto& sh : shards) stored += sh->size;
  // The share's files and every directory of the namespace (MakeDataDirs). Every file is created
  // before the job reads it (eager) or while it does (lazy): short of inodes, reads would fail
  // with ENOSPC after "ready". An image is two files; should the kernel refuse it, StageImage
  // checks for the files before it creates any (a disk formatted with few inodes serves an image
  // all the same). Files fetched from other nodes that no image takes go to the cache, which
  // serves them from memory when it cannot create one.
  share_inodes_ = totals.entries + manifest_.dirs + kSpareInodes;
  FS_RETURN_IF_ERROR(
      CheckInodes(image_ ? kSpareInodes : share_inodes_ + (lazy_ ? mine_.size() : 0)));
  const std::string share = ShareWords();
  if (need > free_bytes_)
    return Status::NoSpace("local directory " + cfg_.local_dir + " has " + HumanBytes(free_bytes_) +
                           " free; " + share + HumanBytes(need));
  *lazy_fits = !lazy_ || need + stored <= free_bytes_;
  stage_bytes_total_ = stored;
  stage_files_total_ = files;
  const bool lazy = lazy_ && *lazy_fits;
  // The cache takes what is left after the staged share (and the copies, while they last):
  // half of it, or --cache-size when that is less (a site-wide cache_size= must not fill a
  // node whose disk is smaller).
  const uint64_t taken = need + (lazy ? stored : 0);
  const uint64_t half_left =
      free_bytes_ == UINT64_MAX || taken > free_bytes_ ? 0 : (free_bytes_ - taken) / 2;
  cache_capacity_ = cfg_.cache_size == 0 ? half_left : std::min(cfg_.cache_size, half_left);
  if (cfg_.cache_size > half_left)
    LOG_WARN(
        "cache limited to %s, half the free space of %s left by the staged share (--cache-size %s)",
        HumanBytes(cache_capacity_).c_str(), cfg_.local_dir.c_str(),
        HumanBytes(cfg_.cache_size).c_str());
  LOG_INFO("staging %zu of %zu shards (%s in %llu files) into %s%s", mine_.size(),
           manifest_.shards.size(), HumanBytes(need).c_str(),
           static_cast<unsigned long long>(files), cfg_.local_dir.c_str(),
           lazy     ? ": copying the shards, unpacking in the background once ready"
           : image_ ? ": as an EROFS image, mounted before ready"
                    : "");
  return Status::OK();  // the directories are made with the table (BuildTable)
}

Status Agent::StageAsync(const Shards* shards) {
  try {
    staging_ = std::async(std::launch::async,
                          [this, shards] { return image_ ? WriteBlob(*shards) : Stage(shards); });
    return Status::OK();
  } catch (const std::system_error& e) {  // no thread to be had (ulimit -u, pids cgroup)
    return Status::IOError(std::string("stage-in: start a thread: ") + e.what());
  }
}

Status Agent::StageWait() { return staging_.valid() ? staging_.get() : Status::OK(); }

Status Agent::Stage(const Shards* shards) {
  TestPause("staging");
  auto t0 = std::chrono::steady_clock::now();
  stage::Options so;
  so.pool = pool_.get();
  so.cancel = &stage_abort_;
  so.on_read = [this](uint64_t n) { read_bytes_ += n; };
  so.on_file = [this](uint64_t n) {
    staged_files_++;
    staged_bytes_ += n;
  };
  stage::Stats ss;
  Status st = lazy_ ? stage::CopyShards(cfg_.dataset, manifest_, dict_, mine_, copy_dir_, so, &ss)
                    : stage::StageShards(manifest_, dict_, *shards, data_root_, so, &ss);
  staged_files_ = ss.files;
  staged_bytes_ = ss.raw_bytes;
  stage_seconds_ = SecondsSince(t0);
  return st;
}

}  // namespace fanstore::agent
