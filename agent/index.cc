// The agent's index and the table built from the stored indexes (see index.h).
#include "agent/index.h"

#include <sys/stat.h>

namespace fanstore::agent {

using format::EntryType;
using format::IndexEntry;

namespace {

// The table's nodes, decoded from every shard's stored index in each pass; the writing pass
// also records each entry's frame.
class StoredNodes : public table::NodeSource {
 public:
  StoredNodes(const Index::Source& src, std::vector<std::vector<Frame>>* frames)
      : src_(src), frames_(frames) {}
  table::Node Root() const override { return src_.root; }

  Status ForEach(int pass, const NodeFn& fn) const override {
    for (uint32_t s = 0; s < src_.shards.size(); s++) FS_RETURN_IF_ERROR(ForEachIn(s, pass, fn));
    return Status::OK();
  }
  // A part is a shard: the builder decodes several at once, each into its own frames.
  size_t Parts() const override { return src_.shards.size(); }
  Status ForEachIn(size_t part, int pass, const NodeFn& fn) const override {
    const auto s = static_cast<uint32_t>(part);
    const StoredIndex& si = src_.shards[s];
    std::vector<Frame>* frames = pass == 1 ? &(*frames_)[s] : nullptr;
    if (frames) frames->reserve(si.footer.entry_count);  // exact: the first pass counted them
    uint32_t i = 0;
    Status st = format::ForEachIndexEntry(si.stored, si.footer, [&](const IndexEntry& e) {
      if (e.offset >= uint64_t{1} << 48) return Status::Corruption("frame beyond 256 TiB");
      if (frames)
        frames->push_back(Frame{e.offset, static_cast<uint8_t>(e.type),
                                static_cast<uint8_t>(e.codec), e.stored_len, e.xxh3});
      table::Node n;
      FS_RETURN_IF_ERROR(MakeNode(s, i++, e, &n));
      return fn(n);
    });
    return st.ok() ? st : st.Prefixed("shard " + std::to_string(s) + " index");
  }

 private:
  Status MakeNode(uint32_t s, uint32_t i, const IndexEntry& e, table::Node* n) const {
    *n = table::Node{e.path, 0, e.size, e.mtime_ns, 0, e.Xattrs()};
    n->ctime_ns = e.ctime_ns;
    switch (e.type) {
      case EntryType::kFile:
        n->mode = S_IFREG | e.mode;
        n->source_shard = s;  // clients read it from the dataset if this agent dies
        n->source_index = i;
        src_.file_flags(s, e, n);
        break;
      case EntryType::kDir:
        n->mode = S_IFDIR | e.mode;
        break;
      case EntryType::kSymlink:
      case EntryType::kHardLink: {
        auto it = src_.links->find(e.path);
        if (it == src_.links->end())
          return Status::Corruption(
              std::string(e.type == EntryType::kSymlink ? "symlink" : "hard link") + " '" + e.path +
              "' has no target");
        n->text = it->second;
        if (e.type == EntryType::kSymlink) {
          n->mode = S_IFLNK | 0777;
        } else {  // the table points it at its file's entry
          n->mode = S_IFREG | e.mode;
          n->hardlink = true;
        }
        break;
      }
    }
    return Status::OK();
  }

  const Index::Source& src_;
  std::vector<std::vector<Frame>>* frames_;
};

}  // namespace

Status Index::Build(const Source& src, const table::BuildOptions& opts,
                    const table::AllocFn& alloc) {
  frames_.assign(src.shards.size(), {});
  first_.assign(src.shards.size(), 0);
  uint64_t next = 1;  // entry 0 is the root
  for (uint32_t s = 0; s < src.shards.size(); s++) {
    first_[s] = static_cast<uint32_t>(next);
    next += src.shards[s].footer.entry_count;
    if (next >= table::kNone) return Status::InvalidArgument("table: namespace too large");
  }
  return table::BuildInto(StoredNodes(src, &frames_), opts, alloc);
}

IndexEntry Index::Entry(uint32_t s, uint32_t i) const {
  const Frame& f = frames_[s][i];
  const table::Entry& m = Meta(s, i);
  IndexEntry e;
  e.type = static_cast<EntryType>(f.type);
  e.codec = static_cast<format::Codec>(f.codec);
  e.mode = m.mode & 07777;
  e.size = m.size;
  e.mtime_ns = m.mtime_ns;
  e.ctime_ns = m.ctime_ns;
  e.offset = f.offset;
  e.stored_len = f.stored_len;
  e.xxh3 = f.xxh3;
  e.path = table_->Path(m);
  return e;
}

}  // namespace fanstore::agent
