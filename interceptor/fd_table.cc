// FdTable: chunk mapping and slot updates.
#include "interceptor/fd_table.h"

#include <sys/mman.h>

namespace fanstore::interceptor {

std::atomic<uint64_t>* FdTable::Chunk(uint32_t index) {
  std::atomic<uint64_t>* chunk = chunks_[index].load(std::memory_order_acquire);
  if (chunk) return chunk;
  const size_t bytes = sizeof(std::atomic<uint64_t>) << kChunkBits;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* fresh = static_cast<std::atomic<uint64_t>*>(p);  // zero-filled: every slot untracked
  if (chunks_[index].compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) return fresh;
  munmap(p, bytes);  // another thread won the race
  return chunk;
}

bool FdTable::Set(int fd, uint64_t slot) {
  if (fd < 0 || static_cast<uint64_t>(fd) >= kCapacity) return slot == 0;
  if (slot == 0 && !chunks_[fd >> kChunkBits].load(std::memory_order_acquire)) return true;
  std::atomic<uint64_t>* chunk = Chunk(static_cast<uint32_t>(fd) >> kChunkBits);
  if (!chunk) return slot == 0;
  chunk[fd & ((1u << kChunkBits) - 1)].store(slot, std::memory_order_release);
  return true;
}

uint64_t FdTable::Record(int fd, uint64_t kind_and_value) {
  uint64_t gen = generation_.fetch_add(1, std::memory_order_relaxed) & 0x3fffffffu;
  uint64_t slot = kind_and_value | (gen << 32);
  return Set(fd, slot) ? slot : 0;
}

uint64_t FdTable::Take(int fd) {
  if (fd < 0 || static_cast<uint64_t>(fd) >= kCapacity) return 0;
  std::atomic<uint64_t>* chunk = chunks_[fd >> kChunkBits].load(std::memory_order_acquire);
  return chunk ? chunk[fd & ((1u << kChunkBits) - 1)].exchange(0, std::memory_order_acq_rel) : 0;
}

bool FdTable::Untrack(int fd, uint64_t expected) {
  if (fd < 0 || static_cast<uint64_t>(fd) >= kCapacity) return false;
  std::atomic<uint64_t>* chunk = chunks_[fd >> kChunkBits].load(std::memory_order_acquire);
  if (!chunk) return false;
  return chunk[fd & ((1u << kChunkBits) - 1)].compare_exchange_strong(expected, 0,
                                                                      std::memory_order_acq_rel);
}

void FdTable::ClearRange(uint64_t first, uint64_t last) {
  if (last >= kCapacity) last = kCapacity - 1;
  for (uint64_t fd = first; fd <= last;) {
    std::atomic<uint64_t>* chunk = chunks_[fd >> kChunkBits].load(std::memory_order_acquire);
    uint64_t chunk_end = ((fd >> kChunkBits) + 1) << kChunkBits;
    if (!chunk) {
      fd = chunk_end;
      continue;
    }
    for (; fd <= last && fd < chunk_end; fd++)
      chunk[fd & ((1u << kChunkBits) - 1)].store(0, std::memory_order_release);
  }
}

}  // namespace fanstore::interceptor
