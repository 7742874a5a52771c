// VDir: a directory stream over a virtual directory, handed to callers as a DIR*.
//
// glibc's DIR is opaque, so a VDir is told apart from a real one by its first field: glibc's
// struct __dirstream begins with the (non-negative) descriptor, a VDir with a negative
// sentinel. Every function that takes a DIR* is wrapped and dispatches on IsVDir().
//
// The listing is ".", "..", then the table's children in name order. Thread safety: like
// glibc's, one stream must not be read from two threads at once; distinct streams are
// independent.
#pragma once

#include <dirent.h>

#include <cstdint>

#include "common/table.h"

namespace fanstore::interceptor {

struct VDir {
  int32_t sentinel;  // kVDirSentinel; where glibc keeps the descriptor
  uint32_t dir;      // entry index of the directory
  int fd;            // descriptor owned by the stream (fdopendir, or opened by dirfd()); -1
  uint64_t pos;      // 0 ".", 1 "..", 2 + i the i-th child
  struct dirent64 ent;
};

inline constexpr int32_t kVDirSentinel = -0x46534449;  // "FSDI", negated

inline bool IsVDir(DIR* d) {
  if (!d) return false;
  int32_t first;
  __builtin_memcpy(&first, d, sizeof first);
  return first == kVDirSentinel;
}
inline VDir* AsVDir(DIR* d) { return reinterpret_cast<VDir*>(d); }

// Allocates a stream over the directory with entry index `dir`, owning descriptor fd (or -1).
// nullptr: ENOMEM.
VDir* NewVDir(uint32_t dir, int fd) noexcept;
// Fills v->ent with the next entry; nullptr at the end.
struct dirent64* NextEntry(const table::TableView& t, VDir* v) noexcept;
// The d_type for an st_mode.
unsigned char DirentType(uint32_t mode) noexcept;

}  // namespace fanstore::interceptor
