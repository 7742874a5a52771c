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

// One node per entry, in index order (BuildTable relies on it), then the root.
Status Agent::TableNodes(std::vector<table::Node>* nodes) const {
  size_t total = 1;
  for (const auto& entries : index_) total += entries.size();
  nodes->reserve(total);
  for (uint32_t s = 0; s < index_.size(); s++) {
    for (const IndexEntry& e : index_[s]) {
      table::Node n{e.path, 0, e.size, e.mtime_ns, 0, {}};
      n.ctime_ns = e.ctime_ns;
      n.text = e.Xattrs();
      switch (e.type) {
        case EntryType::kFile:
          n.mode = S_IFREG | e.mode;
          n.source_shard = s;  // clients read it from the dataset if this agent dies
          n.source_index = static_cast<uint32_t>(&e - index_[s].data());
          n.flags = local_shard_[s] && !lazy_ ? uint32_t{table::kLocal} : 0u;
          // Lazy: a raw frame in this node's verified shard copy, which clients may unpack
          // themselves (about 10 times as fast as asking the agent).
          if (local_shard_[s] && lazy_ && e.codec == format::Codec::kRaw &&
              e.offset + e.size <= UINT32_MAX) {
            n.flags |= table::kRawCopy;
            n.copy_offset = static_cast<uint32_t>(e.offset);
          }
          break;
        case EntryType::kDir:
          n.mode = S_IFDIR | e.mode;
          break;
        case EntryType::kSymlink: {
          n.mode = S_IFLNK | 0777;
          auto it = links_.find(e.path);
          if (it == links_.end())
            return Status::Corruption("symlink '" + e.path + "' has no target");
          n.text = it->second;
          break;
        }
        case EntryType::kHardLink: {  // the table points it at its file's entry
          n.mode = S_IFREG | e.mode;
          auto it = links_.find(e.path);
          if (it == links_.end())
            return Status::Corruption("hard link '" + e.path + "' has no target");
          n.hardlink = true;
          n.text = it->second;
          break;
        }
      }
      nodes->push_back(std::move(n));
    }
  }
  table::Node root{
      "", S_IFDIR | manifest_.root_mode, manifest_.root_size, manifest_.root_mtime_ns, 0, {}};
  root.ctime_ns = manifest_.root_ctime_ns;
  root.text = manifest_.root_xattrs;
  nodes->push_back(root);
  return Status::OK();
}

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
  std::vector<table::Node> nodes;
  FS_RETURN_IF_ERROR(TableNodes(&nodes));
  std::vector<uint32_t> entry_of;
  // Written straight into its file (renamed into place when published): no copy in the heap.
  const std::string tmp = cfg_.run_dir + "/" + kTableTmpName;
  Status built = table::BuildInto(std::move(nodes), TableOptions(), &entry_of,
                                  [&](size_t n) { return table_image_.Create(tmp, n); });
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
