// The metadata table, built from every shard's index once the exchange is done (see agent.h).
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>

#include "agent/agent.h"
#include "common/io.h"

namespace fanstore::agent {

using format::EntryType;
using format::IndexEntry;

// The table's nodes, one per index entry in shard and entry order (BuildTable relies on it),
// then the root, made on demand from the index (issue 13: no array of them all, 88 bytes a
// file, next to the index while the table is built; 24 bytes a file instead).
class Agent::IndexNodes : public table::NodeSource {
 public:
  explicit IndexNodes(const Agent& a) : a_(a) {
    size_t total = 0;
    for (const auto& entries : a.index_) total += entries.size();
    refs_.reserve(total);
    paths_.reserve(total + 1);
    for (uint32_t s = 0; s < a.index_.size(); s++)
      for (uint32_t i = 0; i < a.index_[s].size(); i++) {
        refs_.push_back(uint64_t{s} << 32 | i);
        paths_.emplace_back(a.index_[s][i].path);
      }
    paths_.emplace_back();  // the root
  }
  uint32_t size() const override { return static_cast<uint32_t>(paths_.size()); }
  std::string_view PathOf(uint32_t k) const override { return paths_[k]; }
  table::Node At(uint32_t k) const override {
    if (k == refs_.size()) {
      table::Node root{"",
                       S_IFDIR | a_.manifest_.root_mode,
                       a_.manifest_.root_size,
                       a_.manifest_.root_mtime_ns,
                       0,
                       {}};
      root.ctime_ns = a_.manifest_.root_ctime_ns;
      root.text = a_.manifest_.root_xattrs;
      return root;
    }
    const uint32_t s = static_cast<uint32_t>(refs_[k] >> 32);
    const IndexEntry& e = Ref(k);
    table::Node n{e.path, 0, e.size, e.mtime_ns, 0, e.Xattrs()};
    n.ctime_ns = e.ctime_ns;
    switch (e.type) {
      case EntryType::kFile:
        n.mode = S_IFREG | e.mode;
        n.source_shard = s;  // clients read it from the dataset if this agent dies
        n.source_index = static_cast<uint32_t>(refs_[k]);
        n.flags = a_.local_shard_[s] && !a_.lazy_ ? uint32_t{table::kLocal} : 0u;
        // Lazy: a raw frame in this node's verified shard copy, which clients may unpack
        // themselves (about 10 times as fast as asking the agent).
        if (a_.local_shard_[s] && a_.lazy_ && e.codec == format::Codec::kRaw &&
            e.offset + e.size <= UINT32_MAX) {
          n.flags |= table::kRawCopy;
          n.copy_offset = static_cast<uint32_t>(e.offset);
        }
        break;
      case EntryType::kDir:
        n.mode = S_IFDIR | e.mode;
        break;
      case EntryType::kSymlink:
        n.mode = S_IFLNK | 0777;
        n.text = Target(e);
        break;
      case EntryType::kHardLink:  // the table points it at its file's entry
        n.mode = S_IFREG | e.mode;
        n.hardlink = true;
        n.text = Target(e);
        break;
    }
    return n;
  }
  // Every symlink and hard link has its target (checked before the build).
  Status Check() const {
    for (uint32_t k = 0; k < refs_.size(); k++) {
      const IndexEntry& e = Ref(k);
      if ((e.type == EntryType::kSymlink || e.type == EntryType::kHardLink) &&
          !a_.links_.count(e.path))
        return Status::Corruption(
            std::string(e.type == EntryType::kSymlink ? "symlink" : "hard link") + " '" + e.path +
            "' has no target");
    }
    return Status::OK();
  }

 private:
  const IndexEntry& Ref(uint32_t k) const {
    return a_.index_[refs_[k] >> 32][static_cast<uint32_t>(refs_[k])];
  }
  std::string_view Target(const IndexEntry& e) const { return a_.links_.at(e.path); }

  const Agent& a_;
  std::vector<uint64_t> refs_;  // (shard << 32) | entry
  // The paths again, as views, for the sort's comparisons: through refs_ each would cost two
  // more dependent loads (a third of the time to ready at 1.33M files).
  std::vector<std::string_view> paths_;
};

table::BuildOptions Agent::TableOptions() const {
  table::BuildOptions bo;
  bo.local_root = data_root_;
  if (remote_.cache().capacity() > 0) bo.cache_root = cfg_.local_dir + "/cache";
  // A device number of our own, stable for the dataset, so st_dev never matches a real disk.
  bo.dev = makedev(0xf5, static_cast<unsigned>(manifest_.dataset_id & 0xfffff));
  bo.dataset_id = manifest_.dataset_id;
  bo.uid = ::getuid();
  bo.gid = ::getgid();
  char buf[PATH_MAX];
  if (::realpath(cfg_.dataset.c_str(), buf)) bo.dataset = buf;
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) bo.tool.assign(buf, static_cast<size_t>(n));
  return bo;
}

Status Agent::BuildTable() {
  std::vector<uint32_t> entry_of;
  Status built;
  {
    IndexNodes nodes(*this);
    FS_RETURN_IF_ERROR(nodes.Check());
    // Written straight into its file (renamed into place when published): no copy in the heap.
    const std::string tmp = cfg_.run_dir + "/" + kTableTmpName;
    built = table::BuildInto(nodes, TableOptions(), &entry_of,
                             [&](size_t n) { return table_image_.Create(tmp, n); });
  }
  if (!built.ok()) return built.Prefixed("metadata table");
  // The agent's own view of the table answers its opens by path: the shard and entry of every
  // file by table entry (and, for lazy unpack, the table entry of each file to mark later).
  FS_RETURN_IF_ERROR(view_.Attach(table_image_.view()));
  file_refs_.assign(view_.size(), FileRef{UINT32_MAX, 0, false});
  for (uint32_t s = 0, k = 0; s < index_.size(); s++)
    for (uint32_t i = 0; i < index_[s].size(); i++, k++) {
      if (index_[s][i].type != EntryType::kFile) continue;
      file_refs_[entry_of[k]] = FileRef{s, i, local_shard_[s]};
      if (lazy_ && local_shard_[s]) unpacker_.SetTableEntry(s, i, entry_of[k]);
    }
  // Every directory of the namespace exists under the data root, so that directory
  // descriptors and working directories inside the mount have a real directory behind them.
  for (const auto& shard : index_)
    for (const auto& e : shard)
      if (e.type == EntryType::kDir)
        FS_RETURN_IF_ERROR(MakeDirs(data_root_fd_.get(), e.path, 0700));
  return Status::OK();
}

}  // namespace fanstore::agent
