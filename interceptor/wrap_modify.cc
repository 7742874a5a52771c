// Wrappers that would modify the file system. Under the mount they fail like a read-only
// file system (checked against a read-only bind mount of ext4 on Linux 6.x): lookup errors
// of the parent first (ENOENT, ENOTDIR), then EEXIST for creating an existing name, EXDEV for
// a rename or link across the mount boundary, then EROFS. Descriptors FanStore handed out
// refuse fchmod, fchown, futimens and fsetxattr the same way (the real descriptor behind them
// is a local copy that must not change).
#include <string.h>

#include "interceptor/wrappers.h"

namespace fanstore::interceptor {
namespace {

enum class Mod {
  kCreate,    // mkdir, mknod, mkfifo, symlink: EEXIST when the name exists
  kUnlink,    // unlink: the last component need not exist
  kRmdir,     // rmdir: "." is EINVAL, ".." ENOTEMPTY
  kAttr,      // chmod, chown, utimes, setxattr, removexattr: the path must resolve
  kTruncate,  // truncate: EISDIR for a directory, EINVAL for other non-files
  kNothing,   // utimensat with both times UTIME_OMIT: the kernel returns 0 without a lookup
};

long Denied(const Walk& w, Mod m) {
  const bool only_last_missing = w.err == ENOENT && w.parent;
  switch (m) {
    case Mod::kCreate:
      if (only_last_missing) return -EROFS;
      return w.err ? -w.err : -EEXIST;
    case Mod::kUnlink:
      if (w.last == LastKind::kDot || w.last == LastKind::kDotDot) return -EISDIR;
      return only_last_missing || !w.err ? -EROFS : -w.err;
    case Mod::kRmdir:
      if (w.last == LastKind::kDot) return -EINVAL;
      if (w.last == LastKind::kDotDot) return -ENOTEMPTY;
      return only_last_missing || !w.err ? -EROFS : -w.err;
    case Mod::kAttr:
      return w.err ? -w.err : -EROFS;
    case Mod::kTruncate:
      if (w.err) return -w.err;
      if (table::IsDir(*w.entry)) return -EISDIR;
      return table::IsReg(*w.entry) ? -EROFS : -EINVAL;
    case Mod::kNothing:
      return 0;
  }
  return -EROFS;
}

// One path operation. real(dirfd, path) performs it with libc.
template <typename RealCall>
int ModifyAt(int dirfd, const char* path, bool follow, bool empty_path, Mod m, RealCall&& real) {
  return AsInt(
      OnPath(dirfd, path, follow, empty_path, real, [m](const Walk& w) { return Denied(w, m); }));
}

// An operation on a descriptor.
template <typename RealCall>
int ModifyFd(int fd, RealCall&& real) {
  return AsInt(OnFd(fd, real, [](const table::Entry&) { return -static_cast<long>(EROFS); }));
}

// rename and link name two paths. real(olddirfd, oldpath, newdirfd, newpath).
// old_mod: what the old path must satisfy (kUnlink for rename: its parent must resolve;
// kAttr for link: it must exist).
template <typename RealCall>
int TwoPaths(int olddirfd, const char* oldpath, int newdirfd, const char* newpath, bool follow_old,
             Mod old_mod, RealCall&& real) {
  if (!Intercepting() || (!MaybeOurs(olddirfd, oldpath) && !MaybeOurs(newdirfd, newpath)))
    return real(olddirfd, oldpath, newdirfd, newpath);
  Guard guard;
  ErrnoSaver saved;
  PathScratch s_old, s_new;
  Located o, n;
  if (MaybeOurs(olddirfd, oldpath))
    o = Locate(olddirfd, oldpath, follow_old, false, &s_old);
  else
    o.dirfd = olddirfd, o.path = oldpath;
  if (MaybeOurs(newdirfd, newpath))
    n = Locate(newdirfd, newpath, false, false, &s_new);
  else
    n.dirfd = newdirfd, n.path = newpath;
  if (!o.virt && !n.virt) {
    saved.Restore();
    return real(o.dirfd, o.path, n.dirfd, n.path);
  }
  if (o.virt) {
    long r = Denied(o.walk, old_mod);
    if (r != -EROFS) return AsInt(saved.Finish(r));
  }
  if (n.virt) {
    // rename onto an existing name is allowed (then EROFS); link onto one is EEXIST.
    long r = Denied(n.walk, old_mod == Mod::kAttr ? Mod::kCreate : Mod::kUnlink);
    if (r != -EROFS) return AsInt(saved.Finish(r));
  }
  return AsInt(saved.Finish(o.virt != n.virt ? -EXDEV : -EROFS));
}

}  // namespace
}  // namespace fanstore::interceptor

using namespace fanstore::interceptor;  // NOLINT: the wrappers below are the C entry points
namespace table = fanstore::table;

// glibc's remove() calls its internal unlink and rmdir, which no wrapper sees.
extern "C" int fanstore_remove(const char* path) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kUnlink,
                  [&](int, const char* p) { return Real().remove(p); });
}
extern "C" int fanstore_unlink(const char* path) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kUnlink,
                  [&](int, const char* p) { return Real().unlink(p); });
}
extern "C" int fanstore_unlinkat(int dirfd, const char* path, int flags) noexcept {
  return ModifyAt(dirfd, path, false, false, (flags & AT_REMOVEDIR) ? Mod::kRmdir : Mod::kUnlink,
                  [&](int d, const char* p) { return Real().unlinkat(d, p, flags); });
}
extern "C" int fanstore_rmdir(const char* path) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kRmdir,
                  [&](int, const char* p) { return Real().rmdir(p); });
}
extern "C" int fanstore_mkdir(const char* path, mode_t mode) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kCreate,
                  [&](int, const char* p) { return Real().mkdir(p, mode); });
}
extern "C" int fanstore_mkdirat(int dirfd, const char* path, mode_t mode) noexcept {
  return ModifyAt(dirfd, path, false, false, Mod::kCreate,
                  [&](int d, const char* p) { return Real().mkdirat(d, p, mode); });
}
extern "C" int fanstore_mknod(const char* path, mode_t mode, dev_t dev) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kCreate,
                  [&](int, const char* p) { return Real().mknod(p, mode, dev); });
}
extern "C" int fanstore_mknodat(int dirfd, const char* path, mode_t mode, dev_t dev) noexcept {
  return ModifyAt(dirfd, path, false, false, Mod::kCreate,
                  [&](int d, const char* p) { return Real().mknodat(d, p, mode, dev); });
}
extern "C" int fanstore___xmknod(int ver, const char* path, mode_t mode, dev_t* dev) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kCreate,
                  [&](int, const char* p) { return Real().__xmknod(ver, p, mode, dev); });
}
extern "C" int fanstore___xmknodat(int ver, int dirfd, const char* path, mode_t mode,
                                   dev_t* dev) noexcept {
  return ModifyAt(dirfd, path, false, false, Mod::kCreate,
                  [&](int d, const char* p) { return Real().__xmknodat(ver, d, p, mode, dev); });
}
extern "C" int fanstore_mkfifo(const char* path, mode_t mode) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kCreate,
                  [&](int, const char* p) { return Real().mkfifo(p, mode); });
}
extern "C" int fanstore_mkfifoat(int dirfd, const char* path, mode_t mode) noexcept {
  return ModifyAt(dirfd, path, false, false, Mod::kCreate,
                  [&](int d, const char* p) { return Real().mkfifoat(d, p, mode); });
}
extern "C" int fanstore_symlink(const char* target, const char* linkpath) noexcept {
  return ModifyAt(AT_FDCWD, linkpath, false, false, Mod::kCreate,
                  [&](int, const char* p) { return Real().symlink(target, p); });
}
extern "C" int fanstore_symlinkat(const char* target, int newdirfd, const char* linkpath) noexcept {
  return ModifyAt(newdirfd, linkpath, false, false, Mod::kCreate,
                  [&](int d, const char* p) { return Real().symlinkat(target, d, p); });
}

extern "C" int fanstore_rename(const char* oldpath, const char* newpath) noexcept {
  return TwoPaths(AT_FDCWD, oldpath, AT_FDCWD, newpath, false, Mod::kUnlink,
                  [&](int, const char* o, int, const char* n) { return Real().rename(o, n); });
}
extern "C" int fanstore_renameat(int olddirfd, const char* oldpath, int newdirfd,
                                 const char* newpath) noexcept {
  return TwoPaths(
      olddirfd, oldpath, newdirfd, newpath, false, Mod::kUnlink,
      [&](int od, const char* o, int nd, const char* n) { return Real().renameat(od, o, nd, n); });
}
extern "C" int fanstore_renameat2(int olddirfd, const char* oldpath, int newdirfd,
                                  const char* newpath, unsigned int flags) noexcept {
  return TwoPaths(olddirfd, oldpath, newdirfd, newpath, false, Mod::kUnlink,
                  [&](int od, const char* o, int nd, const char* n) {
                    return Real().renameat2(od, o, nd, n, flags);
                  });
}
extern "C" int fanstore_link(const char* oldpath, const char* newpath) noexcept {
  return TwoPaths(AT_FDCWD, oldpath, AT_FDCWD, newpath, false, Mod::kAttr,
                  [&](int, const char* o, int, const char* n) { return Real().link(o, n); });
}
extern "C" int fanstore_linkat(int olddirfd, const char* oldpath, int newdirfd, const char* newpath,
                               int flags) noexcept {
  return TwoPaths(olddirfd, oldpath, newdirfd, newpath, flags & AT_SYMLINK_FOLLOW, Mod::kAttr,
                  [&](int od, const char* o, int nd, const char* n) {
                    return Real().linkat(od, o, nd, n, flags);
                  });
}

extern "C" int fanstore_chmod(const char* path, mode_t mode) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().chmod(p, mode); });
}
extern "C" int fanstore_lchmod(const char* path, mode_t mode) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().lchmod(p, mode); });
}
extern "C" int fanstore_fchmod(int fd, mode_t mode) noexcept {
  return ModifyFd(fd, [&] { return Real().fchmod(fd, mode); });
}
extern "C" int fanstore_fchmodat(int dirfd, const char* path, mode_t mode, int flags) noexcept {
  return ModifyAt(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), flags & AT_EMPTY_PATH, Mod::kAttr,
                  [&](int d, const char* p) { return Real().fchmodat(d, p, mode, flags); });
}
extern "C" int fanstore_chown(const char* path, uid_t owner, gid_t group) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().chown(p, owner, group); });
}
extern "C" int fanstore_lchown(const char* path, uid_t owner, gid_t group) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().lchown(p, owner, group); });
}
extern "C" int fanstore_fchown(int fd, uid_t owner, gid_t group) noexcept {
  return ModifyFd(fd, [&] { return Real().fchown(fd, owner, group); });
}
extern "C" int fanstore_fchownat(int dirfd, const char* path, uid_t owner, gid_t group,
                                 int flags) noexcept {
  return ModifyAt(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), flags & AT_EMPTY_PATH, Mod::kAttr,
                  [&](int d, const char* p) { return Real().fchownat(d, p, owner, group, flags); });
}

extern "C" int fanstore_utime(const char* path, const struct utimbuf* times) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().utime(p, times); });
}
extern "C" int fanstore_utimes(const char* path, const struct timeval times[2]) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().utimes(p, times); });
}
extern "C" int fanstore_lutimes(const char* path, const struct timeval times[2]) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().lutimes(p, times); });
}
extern "C" int fanstore_futimes(int fd, const struct timeval times[2]) noexcept {
  return ModifyFd(fd, [&] { return Real().futimes(fd, times); });
}
// A null path means the descriptor itself (Linux).
extern "C" int fanstore_futimesat(int dirfd, const char* path,
                                  const struct timeval times[2]) noexcept {
  if (!path) return ModifyFd(dirfd, [&] { return Real().futimesat(dirfd, path, times); });
  return ModifyAt(dirfd, path, true, false, Mod::kAttr,
                  [&](int d, const char* p) { return Real().futimesat(d, p, times); });
}
namespace {
// Both times UTIME_OMIT: nothing to change, which even a read-only file system allows.
bool ChangesNothing(const struct timespec times[2]) {
  return times && times[0].tv_nsec == UTIME_OMIT && times[1].tv_nsec == UTIME_OMIT;
}
}  // namespace

extern "C" int fanstore_utimensat(int dirfd, const char* path, const struct timespec times[2],
                                  int flags) noexcept {
  if (!path) return fanstore_futimens(dirfd, times);
  return ModifyAt(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), flags & AT_EMPTY_PATH,
                  ChangesNothing(times) ? Mod::kNothing : Mod::kAttr,
                  [&](int d, const char* p) { return Real().utimensat(d, p, times, flags); });
}
extern "C" int fanstore_futimens(int fd, const struct timespec times[2]) noexcept {
  if (ChangesNothing(times))
    return AsInt(OnFd(
        fd, [&] { return Real().futimens(fd, times); }, [](const table::Entry&) { return 0L; }));
  return ModifyFd(fd, [&] { return Real().futimens(fd, times); });
}

extern "C" int fanstore_truncate(const char* path, off_t length) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kTruncate,
                  [&](int, const char* p) { return Real().truncate(p, length); });
}
extern "C" int fanstore_truncate64(const char* path, off64_t length) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kTruncate,
                  [&](int, const char* p) { return Real().truncate64(p, length); });
}

extern "C" int fanstore_setxattr(const char* path, const char* name, const void* value, size_t size,
                                 int flags) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().setxattr(p, name, value, size, flags); });
}
extern "C" int fanstore_lsetxattr(const char* path, const char* name, const void* value,
                                  size_t size, int flags) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kAttr, [&](int, const char* p) {
    return Real().lsetxattr(p, name, value, size, flags);
  });
}
extern "C" int fanstore_fsetxattr(int fd, const char* name, const void* value, size_t size,
                                  int flags) noexcept {
  return ModifyFd(fd, [&] { return Real().fsetxattr(fd, name, value, size, flags); });
}
extern "C" int fanstore_removexattr(const char* path, const char* name) noexcept {
  return ModifyAt(AT_FDCWD, path, true, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().removexattr(p, name); });
}
extern "C" int fanstore_lremovexattr(const char* path, const char* name) noexcept {
  return ModifyAt(AT_FDCWD, path, false, false, Mod::kAttr,
                  [&](int, const char* p) { return Real().lremovexattr(p, name); });
}
extern "C" int fanstore_fremovexattr(int fd, const char* name) noexcept {
  return ModifyFd(fd, [&] { return Real().fremovexattr(fd, name); });
}
