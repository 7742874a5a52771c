// Wrappers about names: symlink targets, canonical paths, and the working directory.
//
// The working directory may be virtual. chdir into the mount records the directory in the cwd
// word and also moves the kernel's working directory to the directory's stand-in: the directory
// itself in the kernel-visible view, else its copy under the local root, so that children
// started with exec inherit it: their interceptor maps a working directory inside the local
// root or the mount back to the virtual path (locate.cc, ClassifyRealDir).
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string.h>
#include <algorithm>

#include "interceptor/wrappers.h"

namespace fanstore::interceptor {
namespace {

using table::Entry;

long ReadLink(const Walk& w, char* buf, size_t size) {
  if (w.err) return -w.err;
  if (!table::IsLink(*w.entry)) return -EINVAL;
  std::string_view target = Table().LinkTarget(*w.entry);
  size_t n = target.size() < size ? target.size() : size;
  memcpy(buf, target.data(), n);
  return static_cast<long>(n);
}

// Copies s into resolved, or a malloc'ed buffer when resolved is null.
char* ReturnPath(std::string_view s, char* resolved) {
  if (!resolved) resolved = static_cast<char*>(malloc(s.size() + 1));
  if (!resolved) {
    errno = ENOMEM;
    return nullptr;
  }
  memcpy(resolved, s.data(), s.size());
  resolved[s.size()] = '\0';
  return resolved;
}

// realpath of a located virtual path into resolved (PATH_MAX bytes), or a malloc'ed buffer
// when resolved is null.
char* RealpathVirtual(const Walk& w, char* resolved, int* err) {
  if (w.err) {
    *err = w.err;
    return nullptr;
  }
  char tmp[PATH_MAX];
  long n = Ns().AbsolutePath(*w.entry, tmp, sizeof tmp);
  if (n < 0) {
    *err = ENAMETOOLONG;
    return nullptr;
  }
  char* r = ReturnPath(std::string_view(tmp, static_cast<size_t>(n)), resolved);
  if (!r) *err = ENOMEM;
  return r;
}

// libc's realpath, with directories above the mount that do not exist treated as existing.
char* RealRealpath(const char* path, char* resolved) {
  char* r = Real().realpath(path, resolved);
  if (!r && errno == ENOENT && path) {
    int length = RealAncestorLength(AT_FDCWD, path);
    if (length > 0) return ReturnPath(Mount().substr(0, static_cast<size_t>(length)), resolved);
  }
  return r;
}

char* Realpath(const char* path, char* resolved) {
  if (!path) return Real().realpath(path, resolved);  // EINVAL
  return RoutePath(
      AT_FDCWD, path, true, false, [&] { return Real().realpath(path, resolved); },
      [&](int, const char* p) { return RealRealpath(p, resolved); },
      [&](const Walk& w, const ErrnoSaver& saved) {
        int err = 0;
        char* r = RealpathVirtual(w, resolved, &err);
        saved.Finish(r ? 0 : -err);
        return r;
      });
}

// The virtual working directory as an absolute path into buf[cap]; length or -ERANGE.
long VirtualCwd(uint32_t entry, char* buf, size_t cap) {
  return Ns().AbsolutePath(Table().at(entry), buf, cap);
}

}  // namespace

int ChdirVirtual(const Entry& dir) noexcept {
  if (!table::IsDir(dir)) return -ENOTDIR;
  // Best effort: without a stand-in the kernel's directory stays where it is; the virtual one
  // is what this process resolves against. With the kernel-visible view the directory itself
  // is the stand-in: programs the library does not reach (static ones) then see all of it.
  char path[PATH_MAX];
  if (StandInPath(dir, path) && Real().chdir(path) != 0)
    FS_ILOG(1, "chdir to the stand-in %s failed: %s", path, strerror(errno));
  if (!InVforkChild()) StoreCwd(CwdKind::kVirtual, Table().IndexOf(dir));
  return 0;
}

}  // namespace fanstore::interceptor

using namespace fanstore::interceptor;  // NOLINT: the wrappers below are the C entry points
namespace table = fanstore::table;

namespace {

// readlink of /proc/self/fd/N (and its other spellings) where N is a FanStore descriptor: its
// path under the mount, not the local copy's (-1: not such a path).
long ReadFdLink(const char* path, char* buf, size_t size) noexcept {
  const table::Entry* e = FdLinkEntry(path);
  if (!e) return -1;
  char abs[PATH_MAX];
  const long len = Ns().AbsolutePath(*e, abs, sizeof abs);
  if (len < 0) return -1;
  const size_t k = std::min(static_cast<size_t>(len), size);
  memcpy(buf, abs, k);
  return static_cast<long>(k);
}

}  // namespace

extern "C" ssize_t fanstore_readlink(const char* path, char* buf, size_t size) noexcept {
  if (path)
    if (long r = ReadFdLink(path, buf, size); r >= 0) return r;
  return OnPath(
      AT_FDCWD, path, false, false,
      [&](int, const char* p) { return Real().readlink(p, buf, size); },
      [&](const Walk& w) { return ReadLink(w, buf, size); },
      [](int) { return -static_cast<long>(EINVAL); });
}

// readlinkat(fd, "", ...) reads the link an O_PATH|O_NOFOLLOW descriptor refers to.
extern "C" ssize_t fanstore_readlinkat(int dirfd, const char* path, char* buf,
                                       size_t size) noexcept {
  if (path)
    if (long r = ReadFdLink(path, buf, size); r >= 0) return r;
  return OnPath(
      dirfd, path, false, true,
      [&](int d, const char* p) { return Real().readlinkat(d, p, buf, size); },
      [&](const Walk& w) { return ReadLink(w, buf, size); },
      [](int) { return -static_cast<long>(EINVAL); });
}

extern "C" char* fanstore_realpath(const char* path, char* resolved) noexcept {
  return Realpath(path, resolved);
}

extern "C" char* fanstore_canonicalize_file_name(const char* path) noexcept {
  if (!Intercepting()) return Real().canonicalize_file_name(path);
  return Realpath(path, nullptr);
}

namespace {
// chdir to a real directory, keeping the cwd word right (see CwdAfterRealChdir).
int RealChdir(const char* path) {
  uint64_t word = CwdAfterRealChdir(path);  // before: a relative path names from the old one
  int r = Real().chdir(path);
  if (r == 0 && !InVforkChild()) StoreCwdWord(word);
  return r;
}
}  // namespace

extern "C" int fanstore_chdir(const char* path) noexcept {
  return RoutePath(
      AT_FDCWD, path, true, false, [&] { return Real().chdir(path); },
      [](int, const char* p) { return RealChdir(p); },
      [](const Walk& w, const ErrnoSaver& saved) {
        return AsInt(saved.Finish(w.err ? -w.err : ChdirVirtual(*w.entry)));
      });
}

extern "C" int fanstore_fchdir(int fd) noexcept {
  if (!Intercepting()) return Real().fchdir(fd);
  const uint64_t slot = t_in_wrapper ? 0 : g_fds.Get(fd);
  const Entry* e = TrackedEntry(fd);
  if (!FdTable::IsEntry(slot) || !e) {
    int r = Real().fchdir(fd);
    if (r == 0 && !InVforkChild()) {
      if (FdTable::IsAncestor(slot))
        StoreCwd(CwdKind::kAncestor, FdTable::AncestorLength(slot));
      else
        StoreCwd(CwdKind::kUnknown, 0);
    }
    return r;
  }
  if (!table::IsDir(*e)) {
    errno = ENOTDIR;
    return -1;
  }
  int r = Real().fchdir(fd);  // the stand-in: inherited by children started with exec
  if (r != 0) return r;
  if (!InVforkChild()) StoreCwd(CwdKind::kVirtual, Table().IndexOf(*e));
  return 0;
}

extern "C" char* fanstore_getcwd(char* buf, size_t size) noexcept {
  if (!Intercepting()) return Real().getcwd(buf, size);
  Cwd c = LoadCwd();
  if (c.kind != CwdKind::kVirtual) return Real().getcwd(buf, size);
  char tmp[PATH_MAX];
  long n = VirtualCwd(c.value, tmp, sizeof tmp);
  if (n < 0) {
    errno = ENAMETOOLONG;
    return nullptr;
  }
  const size_t need = static_cast<size_t>(n) + 1;
  if (buf && size == 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (size != 0 && size < need) {
    errno = ERANGE;
    return nullptr;
  }
  if (!buf) {
    buf = static_cast<char*>(malloc(size ? size : need));
    if (!buf) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  memcpy(buf, tmp, need);
  return buf;
}

extern "C" char* fanstore_get_current_dir_name(void) noexcept {
  if (!Intercepting()) return Real().get_current_dir_name();
  Cwd c = LoadCwd();
  if (c.kind != CwdKind::kVirtual) return Real().get_current_dir_name();
  char tmp[PATH_MAX];
  if (VirtualCwd(c.value, tmp, sizeof tmp) < 0) {
    errno = ENAMETOOLONG;
    return nullptr;
  }
  return strdup(tmp);
}
