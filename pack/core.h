// What both packers share (a directory tree's, pack.cc, and an archive stream's, archive.cc):
// the compression of one file, large files streamed into a shard, the shard's non-file entries,
// and the manifest. Internal to pack/.
#pragma once

#include <sys/types.h>
#include <zstd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "format/format.h"
#include "format/manifest.h"
#include "pack/pack.h"
#include "pack/shard_out.h"
#include "pack/walk.h"

namespace fanstore::pack {

// 64 random bits, never 0 (getrandom; the time and pid where it fails).
uint64_t RandomNonZero();

// Files compressed together on one worker: their frames back to back, offsets relative to the
// batch's start.
struct BatchOut {
  Status status;
  std::string data;
  std::vector<format::IndexEntry> entries;
};

// A large file, read in 1 MiB pieces into one buffer.
struct BigSource {
  static constexpr size_t kPiece = 1u << 20;
  std::string path;  // for messages
  UniqueFD fd;
  std::unique_ptr<char[]> in{new char[kPiece]};

  Status ReadAt(uint64_t off, size_t n);
};

class PackCore {
 public:
  PackCore(std::string tmp, const Options& o, mode_t dir_mode);
  ~PackCore();
  PackCore(const PackCore&) = delete;
  PackCore& operator=(const PackCore&) = delete;

 protected:
  bool Cancelled() const { return opts_.cancel && opts_.cancel->load(); }
  // The dataset's files are readable by whom its directory is (no execute bits).
  mode_t FileMode() const { return (dir_mode_ & 0644) | 0600; }
  // Appends the file `e` with content `raw` to `out`, compressed when that makes it smaller.
  // `comp` is scratch space. Thread-safe.
  void CompressFile(const SrcEntry& e, std::string_view raw, std::string* comp,
                    BatchOut* out) const;
  // A file larger than format::kStreamAbove, read, hashed, compressed and written in pieces.
  Status WriteBig(ShardOut& shard, BigSource& src, const SrcEntry& e, format::IndexEntry* ie);
  // Creates shard `id` in the temporary directory.
  Status OpenShard(ShardOut* shard, uint32_t id);
  // Adds directories, symlinks and hard links (frames for their targets) to `shard`.
  Status AppendNonFiles(ShardOut& shard, const std::vector<SrcEntry>& entries);
  // A batch's frames and entries, appended to `shard`; counts them for the manifest.
  Status AppendBatch(ShardOut& shard, BatchOut out);
  // Appends a big file (WriteBig) and counts it.
  Status AppendBig(ShardOut& shard, BigSource& src, const SrcEntry& e);
  // Closes `shard` into its manifest record (shard `id` must have been opened).
  Status FinishShard(ShardOut& shard, uint32_t id);
  // Writes manifest.json (the shards finished so far) and fills `stats`.
  Status WriteManifest(const SourceTree& meta, uint64_t nfiles, uint64_t dirs, uint64_t symlinks,
                       Stats* stats);

  const Options& opts_;
  const std::string tmp_;
  ZSTD_CDict* cdict_ = nullptr;  // owned; set by a packer that trains a dictionary
  format::Manifest manifest_;
  const uint64_t dataset_id_ = RandomNonZero();
  uint64_t raw_total_ = 0;                    // progress total (0: unknown)
  uint64_t files_total_ = 0;                  // progress total (0: unknown)
  uint64_t done_bytes_ = 0, done_files_ = 0;  // written so far

 private:
  void Count(ShardOut& shard, format::IndexEntry e);  // a file's entry added, for the manifest
  void Progress();
  bool SampleCompresses(BigSource& src, uint64_t size);
  Status WriteBigZstd(ShardOut& shard, BigSource& src, const SrcEntry& e, format::IndexEntry* ie,
                      bool* smaller);

  const mode_t dir_mode_;
};

}  // namespace fanstore::pack
