// A bounded, least-recently-used cache of files fetched from peers, kept as plain files in a
// private directory so that clients get real descriptors. Keys are path hashes and files are
// named table::CacheName(key), so clients open cached files directly, without the agent. Eviction
// unlinks the file; a client that has it open keeps reading it. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore::agent {

class FileCache {
 public:
  // `dir` must exist and be private; capacity 0 disables caching.
  void Init(std::string dir, uint64_t capacity);
  // An open read-only descriptor for `key` when cached (it becomes the most recently used),
  // else -1.
  int Open(uint64_t key);
  // Whether the file is cached (without touching its place in the LRU order).
  bool Has(uint64_t key) const;
  // A file being written into the cache, as its content arrives in pieces (a large file is
  // never held in memory whole).
  struct Pending {
    UniqueFD fd;  // write the content here (read-write, so it can be rewound)
    uint64_t key = 0, size = 0;
    std::string tmp;  // the named temporary where the file system has no O_TMPFILE
    bool active = false;
  };
  // Reserves room for `size` bytes under `key`, evicting the least recently used files (with
  // evict = false it fails instead: prefetch must not push out what was read), and opens an
  // unnamed file for them. Fails when the file cannot be cached (larger than the capacity, or
  // the disk is full); the caller then serves it another way.
  Status Begin(uint64_t key, uint64_t size, bool evict, Pending* p);
  // Links the written file under its key and returns a read-only descriptor of it (-1 without
  // want_fd). On failure the pending file is dropped.
  Result<int> Commit(Pending* p, bool want_fd);
  // Drops a pending file and its reservation.
  void Abort(Pending* p);
  uint64_t free_bytes() const;
  uint64_t used() const;
  uint64_t capacity() const { return capacity_; }
  uint64_t evictions() const;

 private:
  std::string PathOf(uint64_t key) const;
  void EvictLocked(uint64_t need);

  std::string dir_;
  std::atomic<uint64_t> capacity_{0};  // set once by Init, read by the stats thread meanwhile
  mutable std::mutex mu_;
  std::list<uint64_t> lru_;  // front: most recent
  struct Slot {
    std::list<uint64_t>::iterator pos;
    uint64_t bytes;
  };
  std::unordered_map<uint64_t, Slot> slots_;
  uint64_t used_ = 0, evictions_ = 0;
  std::atomic<uint64_t> tmp_seq_{0};
};

}  // namespace fanstore::agent
