// Every shard's index as the agent holds it once the table is built (issue 13: the table is
// the only copy of the metadata). The table holds each entry's path and attributes: shard s's
// entry i is table entry First(s) + i. Beside it the agent keeps only what reading a frame
// needs, 24 bytes per entry.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/table_builder.h"
#include "format/format.h"

namespace fanstore::agent {

// Where an entry's bytes are in its shard, and how to check them.
struct Frame {
  uint64_t offset : 48;  // of the frame within the shard (below 256 TiB, checked)
  uint64_t type : 8;     // format::EntryType
  uint64_t codec : 8;    // format::Codec
  uint64_t stored_len;
  uint64_t xxh3;  // of the raw content
};
static_assert(sizeof(Frame) == 24);

// One shard's index as stored (compressed), checked against `footer` when it is decoded.
struct StoredIndex {
  format::Footer footer;
  std::string_view stored;
};

class Index {
 public:
  // What the table is built from: every shard's stored index (decoded twice, one entry at a
  // time: nothing holds them all), the targets of its symlinks and hard links, and the root.
  struct Source {
    std::vector<StoredIndex> shards;                                      // by shard id
    const std::unordered_map<std::string, std::string>* links = nullptr;  // by path
    table::Node root;
    // Sets the node's flags for a file of `shard` (what is local, what clients may unpack).
    std::function<void(uint32_t shard, const format::IndexEntry&, table::Node*)> file_flags;
  };
  // Builds the table image (into `alloc`'s memory) and the frames; then Attach the table.
  Status Build(const Source& src, const table::BuildOptions& opts, const table::AllocFn& alloc);
  void Attach(const table::TableView* table) { table_ = table; }

  uint32_t size() const { return static_cast<uint32_t>(frames_.size()); }  // shards
  uint32_t count(uint32_t s) const { return static_cast<uint32_t>(frames_[s].size()); }
  const Frame& frame(uint32_t s, uint32_t i) const { return frames_[s][i]; }
  bool IsFile(uint32_t s, uint32_t i) const {
    return frames_[s][i].type == static_cast<uint8_t>(format::EntryType::kFile);
  }
  uint32_t TableEntry(uint32_t s, uint32_t i) const { return first_[s] + i; }
  const table::Entry& Meta(uint32_t s, uint32_t i) const { return table_->at(first_[s] + i); }
  std::string_view Path(uint32_t s, uint32_t i) const { return table_->Path(Meta(s, i)); }
  uint64_t Size(uint32_t s, uint32_t i) const { return Meta(s, i).size; }
  // The whole entry, for the format's readers (its path from the table; no extended
  // attributes).
  format::IndexEntry Entry(uint32_t s, uint32_t i) const;

 private:
  std::vector<std::vector<Frame>> frames_;  // by shard, entry
  std::vector<uint32_t> first_;             // by shard: the table entry of its entry 0
  const table::TableView* table_ = nullptr;
};

}  // namespace fanstore::agent
