// One shard file being written by the packer: frames appended in order, hashed as they go,
// then the index and footer, synced and closed.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "format/format.h"
#include "format/manifest.h"

namespace fanstore::pack {

class ShardOut {
 public:
  // With `writeback`, the disk starts writing the shard as it grows (the sync at Finish then
  // waits for little: a packer that syncs its output must not pay for the disk twice).
  explicit ShardOut(mode_t mode = 0600, bool writeback = false)
      : mode_(mode), writeback_(writeback) {}
  // Creates the file (it must not exist) and writes the shard header.
  Status Open(const std::string& path, uint32_t id, uint64_t dataset_id);
  // Appends frame bytes.
  Status Write(std::string_view data);
  uint64_t pos() const { return pos_; }
  std::vector<format::IndexEntry>& entries() { return entries_; }
  // A point to come back to: what has been written since is dropped.
  struct Mark {
    uint64_t pos;
    Xxh3Stream hash;
  };
  Mark GetMark() const { return {pos_, hash_}; }
  Status Rollback(const Mark& m);
  // Writes the index and footer, syncs (with `sync`) and closes; `ref` gets size and hash.
  Status Finish(bool sync, format::ShardRef* ref);

 private:
  std::string path_;
  mode_t mode_;
  uint32_t id_ = 0;
  uint64_t dataset_id_ = 0;
  UniqueFD fd_;
  uint64_t pos_ = 0;
  bool writeback_;
  uint64_t written_back_ = 0;  // asked of the disk up to here
  Xxh3Stream hash_;
  std::vector<format::IndexEntry> entries_;
};

// The file name of shard `i` in a dataset directory.
std::string ShardName(uint32_t i);

}  // namespace fanstore::pack
