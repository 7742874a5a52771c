// Declarations of every wrapper (from symbols.def) and the helpers the wrapper files share.
//
// A wrapper is declared as fanstore_<name> with the assembler name <name>. Using our own C++
// name keeps the definitions free of conflicts with glibc's declarations (exception
// specifications, fortify inlines, deprecation attributes), and the version script exports
// exactly these symbols.
//
// The shape of every path wrapper (see RoutePath and OnPath):
//   if the library is inert, we are inside our own code, or the path cannot be ours (one
//   prefix compare): call libc with the original arguments;
//   otherwise locate the path; a real result (an escape via "..") goes to libc, a virtual one
//   is answered from the table.
#pragma once

#include <string.h>

#include <cstddef>
#include <type_traits>

#include "interceptor/libc_types.h"
#include "interceptor/local_files.h"
#include "interceptor/locate.h"
#include "interceptor/state.h"

#define FS_SYM(ret, name, params)                   \
  extern "C" __attribute__((visibility("default"))) \
  ret fanstore_##name params noexcept __asm__(#name);
#include "interceptor/symbols.def"
#undef FS_SYM

namespace fanstore::interceptor {

// The prologue every path wrapper shares. inert() makes the libc call with the original
// arguments when this call is not ours to look at (an inert process, or our own code calling
// libc); pass(dirfd, path) makes it for a path that is not ours, with the original arguments
// or, after an escape via "..", the real path to continue with; virt(walk, saved) answers for a
// located virtual path, with `saved` holding the caller's errno. All three return what the
// wrapper returns. The path is located under the guard and without allocating.
template <typename InertCall, typename PassCall, typename VirtCall>
auto RoutePath(int dirfd, const char* path, bool follow_last, bool empty_path, InertCall&& inert,
               PassCall&& pass, VirtCall&& virt) noexcept -> decltype(inert()) {
  if (!Intercepting()) return inert();
  if (!MaybeOurs(dirfd, path)) return pass(dirfd, path);
  Guard guard;
  ErrnoSaver saved;
  PathScratch scratch;
  Located loc = Locate(dirfd, path, follow_last, empty_path, &scratch);
  if (!loc.virt) {
    saved.Restore();
    return pass(loc.dirfd, loc.path);
  }
  return virt(loc.walk, saved);
}

// Runs a path operation. real(dirfd, path) performs it with libc; virt(const Walk&) answers
// for a located virtual path with a result >= 0 or -errno. Returns what the wrapper returns,
// with errno set for failures and preserved for successes.
//
// ancestor(int length), when given, answers for a directory above the mount that does not
// exist (the usual case: /fanstore for the mount /fanstore/ds), so that realpath(1), pathlib
// and readlink -f, which look at every component, see a read-only directory there. It runs
// only after libc failed with ENOENT: a pass-through success costs nothing more.
template <typename RealCall, typename VirtCall, typename AncestorCall = std::nullptr_t>
long OnPath(int dirfd, const char* path, bool follow_last, bool empty_path, RealCall&& real,
            VirtCall&& virt, AncestorCall&& ancestor = nullptr) noexcept {
  auto real_or_ancestor = [&](int d, const char* p) -> long {
    long r = real(d, p);
    if constexpr (!std::is_same_v<std::decay_t<AncestorCall>, std::nullptr_t>) {
      if (r < 0 && errno == ENOENT) {
        int length = RealAncestorLength(d, p);
        if (length > 0) return ErrnoSaver().Finish(ancestor(length));
      }
    }
    return r;
  };
  return RoutePath(
      dirfd, path, follow_last, empty_path, [&]() -> long { return real(dirfd, path); },
      real_or_ancestor,
      [&](const Walk& w, const ErrnoSaver& saved) {
        FS_ILOG(2, "%s -> %s", path, w.err ? strerror(w.err) : "entry");
        return saved.Finish(virt(w));
      });
}

// Only an active library records descriptors, so an untracked one costs one table load.
template <typename RealCall, typename VirtCall>
long OnFd(int fd, RealCall&& real, VirtCall&& virt) noexcept {
  if (g_fds.Get(fd) == 0 || t_in_wrapper) return real();
  const table::Entry* e = TrackedEntry(fd);
  if (!e) return real();
  Guard guard;
  ErrnoSaver saved;
  return saved.Finish(virt(*e));
}

// Wrappers return int or ssize_t; OnPath/OnFd compute in long.
inline int AsInt(long r) { return static_cast<int>(r); }

// ---- Shared virtual operations (defined in the wrap_*.cc files) ----
// open(2) of a located virtual path: a tracked descriptor or -errno.
int OpenVirtual(const Walk& w, int flags) noexcept;

// Makes the virtual directory `dir` the working directory. 0 or -errno.
int ChdirVirtual(const table::Entry& dir) noexcept;

}  // namespace fanstore::interceptor
