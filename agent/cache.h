// A bounded, least-recently-used cache of files fetched from peers, kept as plain files in a
// private directory so that clients get real descriptors. Keys are path hashes and files are
// named table::CacheName(key), so clients open cached files directly, without the agent. Eviction unlinks the file; a client
// that has it open keeps reading it. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace fanstore::agent {

class FileCache {
 public:
  // `dir` must exist and be private; capacity 0 disables caching.
  void Init(std::string dir, uint64_t capacity);
  // An open read-only descriptor for `key` when cached (it becomes the most recently used),
  // else -1.
  int Open(uint64_t key);
  // Stores `data` under `key`, evicting the least recently used files to make room, and
  // returns an open read-only descriptor. Fails when the data cannot be cached (larger than
  // the capacity, or the disk is full); the caller then serves it another way.
  // With evict = false, fails instead of evicting (prefetch must not push out what was read);
  // with want_fd = false, returns -1 instead of a descriptor.
  Result<int> Put(uint64_t key, std::string_view data, bool evict = true, bool want_fd = true);
  uint64_t free_bytes() const;
  uint64_t used() const;
  uint64_t capacity() const { return capacity_; }
  uint64_t evictions() const;

 private:
  std::string PathOf(uint64_t key) const;
  void EvictLocked(uint64_t need);

  std::string dir_;
  uint64_t capacity_ = 0;
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
