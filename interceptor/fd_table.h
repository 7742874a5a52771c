// FdTable: which descriptors FanStore handed out, and for which table entry.
//
// A flat array indexed by descriptor number, in lazily mapped chunks, so that a lookup for a
// descriptor FanStore did not hand out costs one or two loads and no lock. A slot holds
//   bit 63      kind: 0 = a descriptor for table entry `value - 1`,
//                     1 = a real directory above the mount, `value` = length of its path
//                         (a prefix of the mount path), so that openat(fd, "ds/...") enters;
//   bit 62      for an entry: the program asked for O_NOATIME (kNoatimeBit);
//   bits 32-61  generation: a per-process counter bumped by every record;
//   bits 0-31   value (never 0).
// 0 means "not ours". The generation makes a slot value name one hand-out: Untrack(fd,
// expected) only clears the slot if it still holds that hand-out, which keeps a racing close
// and re-open of the same number from erasing the newer one.
//
// Thread safety: all members are safe to call concurrently. Chunks are mapped with mmap and
// never unmapped, so readers need no lock and nothing here allocates with malloc (usable from
// signal handlers and between vfork and exec).
#pragma once

#include <atomic>
#include <cstdint>

namespace fanstore::interceptor {

class FdTable {
 public:
  static constexpr uint32_t kChunkBits = 12;         // 4096 slots (32 KiB) per chunk
  static constexpr uint32_t kChunkCount = 1u << 14;  // descriptors below 64 Mi
  static constexpr uint64_t kCapacity = uint64_t{kChunkCount} << kChunkBits;

  static constexpr uint64_t kAncestorBit = uint64_t{1} << 63;
  // An entry's descriptor whose program asked for O_NOATIME (the library adds it to local
  // copies on its own; F_GETFL shows it only when asked).
  static constexpr uint64_t kNoatimeBit = uint64_t{1} << 62;
  static bool IsEntry(uint64_t slot) { return slot != 0 && !(slot & kAncestorBit); }
  static bool IsAncestor(uint64_t slot) { return slot & kAncestorBit; }
  static uint32_t EntryOf(uint64_t slot) { return static_cast<uint32_t>(slot) - 1; }
  static uint32_t AncestorLength(uint64_t slot) { return static_cast<uint32_t>(slot); }

  // The slot of fd, or 0.
  uint64_t Get(int fd) const {
    if (fd < 0 || static_cast<uint64_t>(fd) >= kCapacity) return 0;
    std::atomic<uint64_t>* chunk = chunks_[fd >> kChunkBits].load(std::memory_order_acquire);
    return chunk ? chunk[fd & ((1u << kChunkBits) - 1)].load(std::memory_order_acquire) : 0;
  }
  // Records that fd refers to table entry `entry`; returns the new slot value, or 0 when fd
  // is out of range or a chunk cannot be mapped.
  uint64_t Track(int fd, uint32_t entry, bool noatime = false) {
    return Record(fd, (uint64_t{entry} + 1) | (noatime ? kNoatimeBit : 0));
  }
  // Records that fd is a real directory whose path is the mount path's first `length` bytes.
  uint64_t TrackAncestor(int fd, uint32_t length) { return Record(fd, kAncestorBit | length); }
  // Copies a slot value to another descriptor (dup); 0 clears it.
  bool Set(int fd, uint64_t slot);
  // Clears the slot and returns what it held.
  uint64_t Take(int fd);
  // Clears the slot only if it still holds `expected`.
  bool Untrack(int fd, uint64_t expected);
  // Clears every slot in [first, last] (close_range, closefrom).
  void ClearRange(uint64_t first, uint64_t last);

 private:
  std::atomic<uint64_t>* Chunk(uint32_t index);
  uint64_t Record(int fd, uint64_t kind_and_value);

  std::atomic<std::atomic<uint64_t>*> chunks_[kChunkCount] = {};
  std::atomic<uint32_t> generation_{0};
};

}  // namespace fanstore::interceptor
