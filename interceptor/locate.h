// Locating paths: whether a (dirfd, path) pair is the library's to answer and what it names.
// Absolute paths are compared with the mount; relative ones start from the working-directory
// word or from a tracked descriptor; the part below the mount is walked by the Resolver
// (resolver.h), with the kernel's permission checks along the way. Real directories above the
// mount ("/fanstore" for the mount "/fanstore/ds") are recognised too, so that relative paths
// from them enter the mount.
//
// Thread safety: every function may be called from any thread; the working-directory word is
// an atomic.
#pragma once

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include <cstdint>

#include "common/table.h"
#include "interceptor/resolver.h"

namespace fanstore::interceptor {

// ---- Working directory -------------------------------------------------------------------
// One atomic word: the kernel's working directory as the interceptor sees it.
//   kVirtual: inside the namespace, at entry `value`;
//   kAncestor: a real directory that is a strict ancestor of the mount, value = its length;
//   kOther: any other real directory; kUnknown: not computed since the last real chdir.
enum class CwdKind : uint32_t { kUnknown = 0, kOther = 1, kAncestor = 2, kVirtual = 3 };
struct Cwd {
  CwdKind kind;
  uint32_t value;
};
Cwd LoadCwd() noexcept;  // computes kUnknown lazily (one real getcwd)
void StoreCwd(CwdKind kind, uint32_t value) noexcept;
// Before a real chdir(path): the cwd word to store if it succeeds. Decided lexically when
// possible, else kUnknown (one getcwd later, if a relative path ever needs it).
uint64_t CwdAfterRealChdir(const char* path) noexcept;
void StoreCwdWord(uint64_t word) noexcept;

// ---- Locating paths ----------------------------------------------------------------------
// Where a (dirfd, path) pair points, after following escapes.
struct Located {
  bool virt = false;
  // !virt: the real call to make (the original arguments, or an absolute rewrite).
  int dirfd = AT_FDCWD;
  const char* path = nullptr;
  // virt: the walk result.
  Walk walk;
};

// Scratch space for Locate(): rewritten paths live here.
struct PathScratch {
  char buf[2][PATH_MAX];
};

// The fast test: could (dirfd, path) be ours? For absolute paths one prefix compare; for
// relative ones a look at the cwd word or the descriptor table.
bool MaybeOurs(int dirfd, const char* path) noexcept;

// Resolves (dirfd, path). empty_path: AT_EMPTY_PATH was given (an empty path names dirfd).
// Call only when MaybeOurs() said yes; the result may still be real (escapes).
Located Locate(int dirfd, const char* path, bool follow_last, bool empty_path,
               PathScratch* scratch) noexcept;

// Whether the mode bits the table reports (owner: the job user) let the caller have `mode`
// (R_OK, W_OK, X_OK), as the kernel checks them; root may read and search anything.
bool Permitted(const table::Entry& e, int mode, bool effective = true) noexcept;

// The entry behind /proc/self/fd/N, /proc/thread-self/fd/N, /proc/<own pid>/fd/N or /dev/fd/N when
// N is a tracked descriptor (the kernel would resolve those to the local copy), else nullptr.
const table::Entry* FdLinkEntry(const char* path) noexcept;

// ---- Real directories above the mount ----------------------------------------------------
// When (dirfd, path) names a real directory above the mount (lexically: "/", "/fanstore" for
// the mount "/fanstore/ds"), the length of its path, else -1. Relative paths count only from
// a working directory or descriptor already known to be such a directory. No syscalls.
int RealAncestorLength(int dirfd, const char* path) noexcept;

// Attributes of a directory above the mount that does not exist: root-owned, mode 0555,
// holding one directory, with the table's device and the root's times. `length` as from
// RealAncestorLength().
void FillAncestorStat(int length, struct stat* st) noexcept;

// A pass-through open of (dirfd, path) returned fd (or failed, fd < 0): record it when it is
// a directory above the mount (tar -C /fanstore then openat(fd, "ds")), else forget any stale
// record of the number.
void AfterRealOpen(int dirfd, const char* path, int fd) noexcept;

}  // namespace fanstore::interceptor
