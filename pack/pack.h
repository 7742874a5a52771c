// `fanstore pack`: turns a directory tree into a dataset (manifest.json + balanced shards).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace fanstore::pack {

struct Options {
  uint64_t shard_size = 256ull << 20;  // target bytes per shard
  uint64_t shard_files = 1ull << 20;   // at most this many files per shard
  int level = 3;                       // zstd level; 0 stores everything raw
  size_t threads = 0;                  // 0: all cores
  bool dict = false;                   // train a zstd dictionary for small files
  bool inner_archives = true;          // archives: expand an archive found inside one
  bool sync = true;                    // fsync shards and manifest before the final rename
  // Progress: (bytes done, bytes total, files done, files total). Called from one thread.
  std::function<void(uint64_t, uint64_t, uint64_t, uint64_t)> progress;
  // Warnings about entries that are not stored (sockets, devices, escaping symlinks).
  std::function<void(const std::string&)> warn;
  // Polled; when it becomes true the pack stops, removes its temporary directory and fails.
  const std::atomic<bool>* cancel = nullptr;
};

struct Stats {
  uint64_t files = 0, dirs = 0, symlinks = 0, skipped = 0, shards = 0;
  uint64_t raw_bytes = 0, stored_bytes = 0;
  bool dict_used = false;
};

// Packs `srcs` into the new directory `dst`, which must not exist: one directory tree, or tar
// archives (archive.h; "-" is standard input). Written under a temporary name in dst's parent
// and renamed into place only when complete, so an interrupted pack never leaves a dataset that
// looks valid.
Status Pack(const std::vector<std::string>& srcs, const std::string& dst, const Options& opts,
            Stats* stats);
inline Status Pack(const std::string& src, const std::string& dst, const Options& opts,
                   Stats* stats) {
  return Pack(std::vector<std::string>{src}, dst, opts, stats);
}

}  // namespace fanstore::pack
