// The metadata table, built from every shard's index once the exchange is done (see agent.h).
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"

namespace fanstore::agent {

table::BuildOptions Agent::TableOptions() const {
  table::BuildOptions bo;
  bo.local_root = data_root_;
  if (CacheCapacity() > 0) bo.cache_root = cfg_.local_dir + "/cache";
  // A device number of our own, stable for the dataset, so st_dev never matches a real disk.
  bo.dev = makedev(0xf5, static_cast<unsigned>(manifest_.dataset_id & 0xfffff));
  bo.dataset_id = manifest_.dataset_id;
  // The shards' indexes are decoded on every core: the table is the exchange's last step before
  // ready, and its O(entries) work leads J1 at ImageNet-22k's 14M entries (docs/benchmarks.md).
  bo.threads = pool_ ? pool_->size() : 1;
  bo.uid = ::getuid();
  bo.gid = ::getgid();
  char buf[PATH_MAX];
  if (::realpath(cfg_.dataset.c_str(), buf)) bo.dataset = buf;
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) bo.tool.assign(buf, static_cast<size_t>(n));
  return bo;
}

Status Agent::BuildTable() {
  const auto t0 = SteadyClock::now();
  Index::Source src;
  src.shards = std::move(decoded_.index);
  src.links = &links_;
  src.root =
      table::Node{"", S_IFDIR | manifest_.root_mode, manifest_.root_size, manifest_.root_mtime_ns,
                  0,  manifest_.root_xattrs};
  src.root.ctime_ns = manifest_.root_ctime_ns;
  src.file_flags = [this](uint32_t s, const format::IndexEntry& e, table::Node* n) {
    if (!local_shard_[s]) return;
    // Lazy: a raw frame in this node's verified shard copy, which clients may unpack
    // themselves (about 10 times as fast as asking the agent).
    if (!lazy_) {
      n->flags = table::kLocal;
    } else if (e.codec == format::Codec::kRaw && e.offset + e.size <= UINT32_MAX) {
      n->flags = table::kRawCopy;
      n->copy_offset = static_cast<uint32_t>(e.offset);
    }
  };
  // Written straight into its file (renamed into place when published): no copy in the heap.
  const std::string tmp = cfg_.run_dir + "/" + kTableTmpName;
  const table::BuildOptions options = TableOptions();
  Status built = index_.Build(src, options, [&](size_t n) { return table_image_.Create(tmp, n); });
  // Decoded into the table: the messages are not needed any more.
  src = {};
  decoded_ = {};
  std::vector<std::string>().swap(exchanged_);
  if (!built.ok()) return built.Prefixed("metadata table");
  const double build_s = SecondsSince(t0);
  FS_RETURN_IF_ERROR(view_.Attach(table_image_.view()));
  index_.Attach(&view_);
  FS_RETURN_IF_ERROR(exchange::CheckLinks(links_, [&](const std::string& path) {
    const table::Entry* e = view_.Lookup(path);
    return e && table::IsDir(*e);
  }));
  links_ = {};  // in the table now
  const double check_s = SecondsSince(t0);
  // An image holds every directory itself (StageImage).
  FS_RETURN_IF_ERROR(image_ ? Status::OK() : MakeDataDirs());
  LOG_DEBUG(
      "table: %u entries built in %.2f s (%zu threads), checked in %.2f s%s", view_.size(), build_s,
      options.threads, check_s - build_s,
      image_
          ? ""
          : (", directories made in " + std::to_string(SecondsSince(t0) - check_s) + " s").c_str());
  return Status::OK();
}

Status Agent::MakeDataDirs() {
  // Every directory of the namespace exists under the data root, so that directory
  // descriptors and working directories inside the mount have a real directory behind them.
  for (uint32_t i = 1; i < view_.size(); i++)
    if (table::IsDir(view_.at(i)))
      FS_RETURN_IF_ERROR(MakeDirs(data_root_fd_.get(), std::string(view_.Path(view_.at(i))), 0700));
  return Status::OK();
}

}  // namespace fanstore::agent
