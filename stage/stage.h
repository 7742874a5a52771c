// The stage-in engine: reads a node's shards from the dataset directory (usually on the
// parallel file system) with large sequential reads, and unpacks them into a local directory.
// Hashing, decompression and writing overlap on a thread pool; every file's hash is checked.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "format/manifest.h"
#include "format/shard.h"

namespace fanstore {
class ThreadPool;
}

namespace fanstore::stage {

struct Options {
  ThreadPool* pool = nullptr;                       // decode/hash/write workers; null: inline
  std::function<void(uint64_t bytes)> on_read;      // progress from the reading thread
  std::function<void(uint64_t raw_bytes)> on_file;  // a file staged (any worker thread)
  const std::atomic<bool>* cancel = nullptr;        // checked between chunks
};

struct Stats {
  uint64_t shards = 0, files = 0, raw_bytes = 0, read_bytes = 0;
  double seconds = 0;
};

// Opens the given shards (header, footer, index; three reads each) and checks each against the
// manifest (size, shard id, dataset id). `parse`: as format::OpenShard.
Result<std::vector<std::unique_ptr<format::ShardFile>>> OpenShards(const std::string& dataset_dir,
                                                                   const format::Manifest& m,
                                                                   const std::vector<uint32_t>& ids,
                                                                   bool parse = true);

// Unpacks every regular file of `shards` under `local_root` (an existing, private, empty
// directory): directories 0700, files 0400, at <local_root>/<path>. The whole-shard checksum
// from the manifest and every file's checksum are verified. On error the caller removes
// local_root; nothing is ever written outside it.
Status StageShards(const format::Manifest& m, const format::Dictionary& dict,
                   const std::vector<std::unique_ptr<format::ShardFile>>& shards,
                   const std::string& local_root, const Options& opts, Stats* stats);

// Creates the parent directory of every regular file of `shards` under `root_fd` (0700).
Status MakeParentDirs(int root_fd, const std::string& local_root,
                      const std::vector<std::unique_ptr<format::ShardFile>>& shards);

// Creates <local_root>/<path> (0400, exclusively, never through a symlink) for writing; the
// path comes from a validated index, and root_fd is the private local root.
Result<UniqueFD> CreateStaged(int root_fd, const std::string& local_root, const std::string& path);
// CreateStaged, then writes the file's whole (decoded, verified) content `data`.
Status WriteStaged(int root_fd, const std::string& local_root, const format::IndexEntry& e,
                   std::string_view data);
// CreateStaged, then writes a large file as `decode` streams it (ScanOptions::stream).
Status WriteStagedStream(int root_fd, const std::string& local_root, const format::IndexEntry& e,
                         const format::DecodeFn& decode);

// Lazy stage-in, first half: copies shards `ids` of the dataset as they are into `copy_dir`
// (named table::CopyName(id); sequential reads, parallel over shards), checking the manifest's size
// and whole-shard hash on the way. It needs only the manifest, so it can start before the indexes
// are read. A copy whose hash does not match is reported like StageShards reports it: the bad file
// and frame when one is, else the shard. stats->raw_bytes stays 0.
Status CopyShards(const std::string& dataset_dir, const format::Manifest& m,
                  const format::Dictionary& dict, const std::vector<uint32_t>& ids,
                  const std::string& copy_dir, const Options& opts, Stats* stats);

// Points each ShardFile (opened in the dataset directory) at its copy in `copy_dir`, so that
// its files are unpacked later from local storage.
Status UseCopies(std::vector<std::unique_ptr<format::ShardFile>>& shards,
                 const std::string& copy_dir);

}  // namespace fanstore::stage
