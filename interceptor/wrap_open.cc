// Wrappers that create, duplicate and close descriptors: the open family, the stdio opens,
// close, dup and fcntl. Opens under the mount return real descriptors (a local copy, a
// descriptor from the agent, or a directory stand-in), recorded in g_fds so that fstat and
// the *at calls can answer from the table.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "interceptor/agent_client.h"
#include "interceptor/orphan.h"
#include "interceptor/wrappers.h"

namespace fanstore::interceptor {
namespace {

using table::Entry;

bool NeedsMode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

// A pass-through open of (dirfd, path) returned fd.
int Passed(int dirfd, const char* path, int fd) {
  AfterRealOpen(dirfd, path, fd);
  return fd;
}

// Opens the data of regular file `name`: its local copy, else a descriptor from the agent.
int OpenFileData(const Entry& name, int flags) {
  const table::TableView& t = Table();
  const Entry& e = t.Target(name);  // a hard link's data is its file's
  // The caller's flags that apply to reading, O_DIRECT and O_NOATIME included: the copy's file
  // system then answers them as it would for the dataset's own tree (EINVAL for O_DIRECT on a
  // tmpfs, EPERM for O_NOATIME on someone else's file).
  const int keep =
      flags & (O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_PATH | O_LARGEFILE | O_DIRECT | O_NOATIME);
  // The agent died or shut down (one memory load, no syscall): the file comes from where it
  // still is, its staged copy, the cache or the dataset itself.
  auto without_agent = [&] {
    if (flags & O_PATH) return OpenDirStandIn(t.at(0), O_PATH | (flags & O_CLOEXEC));
    int fd = OpenWithoutAgent(e, keep);
    if (fd >= 0 && !(flags & O_CLOEXEC)) Real().fcntl(fd, F_SETFD, 0);
    return fd;
  };
  if (!t.AgentAlive()) return without_agent();
  std::string_view rel = t.Path(e);
  // kLocal may be set by the agent after this process mapped the table (lazy unpack).
  const uint32_t eflags = table::EntryFlagsOf(e);
  if (eflags & table::kLocal) {
    int fd = OpenLocalCopy(e, keep);
    if (fd >= 0) {
      if (g_cfg.counters)
        table::CountOpen(&g_cfg.counters->local_opens, &g_cfg.counters->local_bytes, e.size);
      return fd;
    }
    // O_DIRECT the copy's file system refuses, O_NOATIME on a file not the caller's: the answer.
    if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM || fd == -EINTR || fd == -EINVAL ||
        fd == -EPERM)
      return fd;
    FS_ILOG(1, "local copy of %.*s: %s; asking the agent", static_cast<int>(rel.size()), rel.data(),
            strerror(-fd));
  }
  // A path-only descriptor needs no data: do not fetch the file for it.
  if (flags & O_PATH) return OpenDirStandIn(t.at(0), O_PATH | (flags & O_CLOEXEC));
  // Lazy unpack has not reached it yet, and its bytes lie raw in this node's shard copy.
  if ((eflags & (table::kRawCopy | table::kLocal)) == table::kRawCopy) {
    int fd = SelfUnpack(e, keep);
    if (fd >= 0) {
      if (g_cfg.counters) {
        table::CountOpen(&g_cfg.counters->local_opens, &g_cfg.counters->local_bytes, e.size);
        __atomic_fetch_add(&g_cfg.counters->self_unpacks, 1, __ATOMIC_RELAXED);
      }
      return fd;
    }
    if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM || fd == -EINTR) return fd;
  }
  // Fetched from a peer before: the agent's cache file, opened directly.
  if (!(eflags & table::kLocal)) {
    int fd = OpenCachedCopy(e, keep);
    if (fd >= 0) {
      if (g_cfg.counters)
        table::CountOpen(&g_cfg.counters->cached_opens, &g_cfg.counters->cached_bytes, e.size);
      return fd;
    }
  }
  int fd = AgentOpen(g_cfg.socket, rel, g_cfg.open_timeout_ms);
  // The agent died with the request in hand (the kernel marks its lock before it closes its
  // sockets): the file comes from where it still is, as for the next open.
  if (fd == -EIO && !t.AgentAlive()) return without_agent();
  if (fd < 0) return fd;
  if (!(flags & O_CLOEXEC)) Real().fcntl(fd, F_SETFD, 0);
  if ((flags & (O_NONBLOCK | O_DIRECT)) &&
      Real().fcntl(fd, F_SETFL, flags & (O_NONBLOCK | O_DIRECT)) != 0) {
    const int err = errno;
    Real().close(fd);
    return -err;
  }
  return fd;
}

// fopen mode string to open(2) flags; -EINVAL when malformed.
int FlagsFromMode(const char* mode) {
  int flags;
  switch (mode ? mode[0] : '\0') {
    case 'r':
      flags = O_RDONLY;
      break;
    case 'w':
      flags = O_WRONLY | O_CREAT | O_TRUNC;
      break;
    case 'a':
      flags = O_WRONLY | O_CREAT | O_APPEND;
      break;
    default:
      return -EINVAL;
  }
  for (const char* p = mode + 1; *p && *p != ','; p++) {
    if (*p == '+')
      flags = (flags & ~O_ACCMODE) | O_RDWR;
    else if (*p == 'x')
      flags |= O_EXCL;
    else if (*p == 'e')
      flags |= O_CLOEXEC;
  }
  return flags;
}

// Copies the record of `from` to `to` after a successful dup.
void CopySlot(int from, int to) {
  if (!InVforkChild())
    ForgetLocalRootFd(static_cast<unsigned>(to),
                      static_cast<unsigned>(to));  // dup2 onto it closed it
  uint64_t s = g_fds.Get(from);
  if (s == g_fds.Get(to) || InVforkChild()) return;
  int saved = errno;
  g_fds.Set(to, s);
  errno = saved;
}

// Forgets fd before it is closed (before, so that a racing open of the same number that
// records itself after the close is not erased).
void BeforeClose(int fd) {
  if (InVforkChild()) return;
  ForgetLocalRootFd(static_cast<unsigned>(fd), static_cast<unsigned>(fd));
  uint64_t slot = g_fds.Get(fd);
  if (slot) g_fds.Untrack(fd, slot);
}

// A descriptor OpenVirtual handed out, until its caller keeps it: forgotten, then closed.
struct UntrackAndClose {
  void operator()(int fd) const noexcept {
    BeforeClose(fd);
    Real().close(fd);
  }
};
using TrackedFD = BasicUniqueFD<UntrackAndClose>;

// Whether an open with these flags follows a final symlink: not with O_NOFOLLOW, nor when it
// creates exclusively.
bool FollowsLast(int flags) {
  return !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
}

FILE* FopenAny(const char* path, const char* mode, FILE* (*real)(const char*, const char*)) {
  // A malformed mode fails with EINVAL either way: from libc, or from FlagsFromMode.
  const int flags = FlagsFromMode(mode);
  return RoutePath(
      AT_FDCWD, path, flags < 0 || FollowsLast(flags), false, [&] { return real(path, mode); },
      [&](int, const char* p) {
        FILE* f = real(p, mode);
        if (f) ForgetStale(fileno(f));
        return f;
      },
      [&](const Walk& w, const ErrnoSaver& saved) -> FILE* {
        if (flags < 0) {
          saved.Finish(flags);
          return nullptr;
        }
        const int r = OpenVirtual(w, flags);
        if (r < 0) {
          saved.Finish(r);
          return nullptr;
        }
        TrackedFD fd(r);
        FILE* f = fdopen(fd.get(), mode);
        if (!f) {
          const int err = errno;
          fd.Reset();
          saved.Finish(-err);
          return nullptr;
        }
        fd.Release();  // the stream's now
        saved.Restore();
        return f;
      });
}

FILE* FreopenAny(const char* path, const char* mode, FILE* stream,
                 FILE* (*real)(const char*, const char*, FILE*)) {
  // freopen(NULL, ...) reopens the same file through /proc/self/fd and keeps the number:
  // the record stays valid.
  if (!stream || !path) return real(path, mode, stream);
  const int flags = FlagsFromMode(mode);
  auto pass = [&](int, const char* p) {
    const int old = fileno(stream);
    const uint64_t old_slot = g_fds.Get(old);
    FILE* f = real(p, mode, stream);
    const int err = errno;
    if (old_slot && !InVforkChild()) g_fds.Untrack(old, old_slot);  // closed or replaced
    if (f) ForgetStale(fileno(f));
    errno = err;
    return f;
  };
  return RoutePath(
      AT_FDCWD, path, flags < 0 || FollowsLast(flags), false,
      [&] { return real(path, mode, stream); }, pass,
      [&](const Walk& w, const ErrnoSaver& saved) -> FILE* {
        if (flags < 0) return pass(AT_FDCWD, path);  // libc refuses the mode itself
        const int old = fileno(stream);
        const uint64_t old_slot = g_fds.Get(old);
        const int r = OpenVirtual(w, flags);
        if (r < 0) {
          // Like glibc: the original stream is closed even when the new file cannot be opened.
          BeforeClose(old);
          Real().fclose(stream);
          saved.Finish(r);
          return nullptr;
        }
        // Let glibc do the stream work on our descriptor: reopen it through /proc/self/fd,
        // which glibc then moves onto the stream's old number.
        TrackedFD fd(r);
        const Entry& e = *TrackedEntry(fd.get());
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd.get());
        if (old_slot && !InVforkChild()) g_fds.Untrack(old, old_slot);
        FILE* f = real(proc, mode, stream);
        const int err = errno;
        fd.Reset();
        if (!f) {
          saved.Finish(-err);
          return nullptr;
        }
        TrackNew(fileno(f), e);
        saved.Restore();
        return f;
      });
}

// The open family. real(dirfd, path) is the wrapper's own libc function with its own flags and
// mode; `flags` is what a virtual open sees (O_LARGEFILE added for the *64 variants).
template <typename RealCall>
int OpenPath(int dirfd, const char* path, int flags, RealCall&& real) {
  // /proc/self/fd/N of a FanStore descriptor is the file under the mount, not its local copy:
  // opened as such (a write is EROFS, as through the mount; the new descriptor is tracked).
  char abs[PATH_MAX];
  if (const Entry* e = FdLinkEntry(path); e && Ns().AbsolutePath(*e, abs, sizeof abs) > 0) {
    dirfd = AT_FDCWD;
    path = abs;
  }
  return RoutePath(
      dirfd, path, FollowsLast(flags), false, [&] { return real(dirfd, path); },
      [&](int d, const char* p) { return Passed(d, p, real(d, p)); },
      [&](const Walk& w, const ErrnoSaver& saved) {
        const int r = OpenVirtual(w, flags);
        FS_ILOG(2, "open %s flags %#x -> %d%s%s", path, flags, r, r < 0 ? " " : "",
                r < 0 ? strerror(-r) : "");
        return AsInt(saved.Finish(r));
      });
}

}  // namespace

int OpenVirtual(const Walk& w, int flags) noexcept {
  const bool path_only = flags & O_PATH;  // O_PATH ignores access mode, O_CREAT and O_TRUNC
  const bool writes = !path_only && (flags & O_ACCMODE) != O_RDONLY;
  if (!path_only && (flags & O_TMPFILE) == O_TMPFILE) {
    if (w.err) return -w.err;
    if (!table::IsDir(*w.entry)) return -ENOTDIR;
    return writes ? -EROFS : -EINVAL;
  }
  if (w.err) {
    if (w.err == ENOENT && w.parent && !path_only && (flags & O_CREAT))
      return w.trailing_slash ? -EISDIR : -EROFS;
    return -w.err;
  }
  const Entry& e = *w.entry;
  if (!path_only && (flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return -EEXIST;
  // The mode bits, before EROFS, as a read-only mount checks them: a 0000 file is EACCES.
  const int need = (flags & O_ACCMODE) == O_RDONLY   ? R_OK
                   : (flags & O_ACCMODE) == O_WRONLY ? W_OK
                                                     : R_OK | W_OK;
  if (!path_only && !(table::IsDir(e) && writes) && !table::IsLink(e) && !Permitted(e, need))
    return -EACCES;
  int fd;
  if (table::IsLink(e)) {  // a final symlink that was not followed (O_NOFOLLOW)
    if (!path_only) return -ELOOP;
    fd = OpenDirStandIn(Table().at(0), O_PATH | (flags & O_CLOEXEC));
  } else if (table::IsDir(e)) {
    if (writes || (!path_only && (flags & O_CREAT))) return -EISDIR;
    fd = OpenDirStandIn(e, flags);
  } else {
    if (flags & O_DIRECTORY) return -ENOTDIR;
    if (writes || (!path_only && (flags & O_TRUNC))) return -EROFS;
    if (!table::IsReg(e)) return -ENXIO;
    fd = OpenFileData(e, flags);
  }
  if (fd < 0) return fd;
  return TrackNew(fd, e, flags);
}

}  // namespace fanstore::interceptor

using namespace fanstore::interceptor;  // NOLINT: the wrappers below are the C entry points
namespace table = fanstore::table;

#define FS_MODE_ARG(flags)     \
  mode_t mode = 0;             \
  if (NeedsMode(flags)) {      \
    va_list ap;                \
    va_start(ap, flags);       \
    mode = va_arg(ap, mode_t); \
    va_end(ap);                \
  }

extern "C" int fanstore_open(const char* path, int flags, ...) noexcept {
  FS_MODE_ARG(flags);
  return OpenPath(AT_FDCWD, path, flags,
                  [&](int, const char* p) { return Real().open(p, flags, mode); });
}

extern "C" int fanstore_open64(const char* path, int flags, ...) noexcept {
  FS_MODE_ARG(flags);
  return OpenPath(AT_FDCWD, path, flags | O_LARGEFILE,
                  [&](int, const char* p) { return Real().open64(p, flags, mode); });
}

extern "C" int fanstore_openat(int dirfd, const char* path, int flags, ...) noexcept {
  FS_MODE_ARG(flags);
  return OpenPath(dirfd, path, flags,
                  [&](int d, const char* p) { return Real().openat(d, p, flags, mode); });
}

extern "C" int fanstore_openat64(int dirfd, const char* path, int flags, ...) noexcept {
  FS_MODE_ARG(flags);
  return OpenPath(dirfd, path, flags | O_LARGEFILE,
                  [&](int d, const char* p) { return Real().openat64(d, p, flags, mode); });
}

// The _FORTIFY_SOURCE entry points: no mode (glibc aborts if O_CREAT is given without one).
extern "C" int fanstore___open_2(const char* path, int flags) noexcept {
  return OpenPath(AT_FDCWD, path, flags,
                  [&](int, const char* p) { return Real().__open_2(p, flags); });
}

extern "C" int fanstore___open64_2(const char* path, int flags) noexcept {
  return OpenPath(AT_FDCWD, path, flags | O_LARGEFILE,
                  [&](int, const char* p) { return Real().__open64_2(p, flags); });
}

extern "C" int fanstore___openat_2(int dirfd, const char* path, int flags) noexcept {
  return OpenPath(dirfd, path, flags,
                  [&](int d, const char* p) { return Real().__openat_2(d, p, flags); });
}

extern "C" int fanstore___openat64_2(int dirfd, const char* path, int flags) noexcept {
  return OpenPath(dirfd, path, flags | O_LARGEFILE,
                  [&](int d, const char* p) { return Real().__openat64_2(d, p, flags); });
}

extern "C" int fanstore_creat(const char* path, mode_t mode) noexcept {
  return OpenPath(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                  [&](int, const char* p) { return Real().creat(p, mode); });
}

extern "C" int fanstore_creat64(const char* path, mode_t mode) noexcept {
  return OpenPath(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC | O_LARGEFILE,
                  [&](int, const char* p) { return Real().creat64(p, mode); });
}

extern "C" FILE* fanstore_fopen(const char* path, const char* mode) noexcept {
  return FopenAny(path, mode, Real().fopen);
}

extern "C" FILE* fanstore_fopen64(const char* path, const char* mode) noexcept {
  return FopenAny(path, mode, Real().fopen64);
}

extern "C" FILE* fanstore_freopen(const char* path, const char* mode, FILE* stream) noexcept {
  return FreopenAny(path, mode, stream, Real().freopen);
}

extern "C" FILE* fanstore_freopen64(const char* path, const char* mode, FILE* stream) noexcept {
  return FreopenAny(path, mode, stream, Real().freopen64);
}

extern "C" int fanstore_fclose(FILE* stream) noexcept {
  if (stream && !t_in_wrapper) BeforeClose(fileno(stream));
  return Real().fclose(stream);
}

// Descriptors FanStore did not hand out cost one table load here (the table is all zeroes in
// an inert process).
extern "C" int fanstore_close(int fd) noexcept {
  if (!t_in_wrapper) BeforeClose(fd);
  return Real().close(fd);
}

extern "C" int fanstore_close_range(unsigned int first, unsigned int last, int flags) noexcept {
  // Python's subprocess calls this between vfork and exec: the parent's records must stay.
  if (!t_in_wrapper && !(flags & CLOSE_RANGE_CLOEXEC) && !InVforkChild()) {
    ForgetLocalRootFd(first, last);
    g_fds.ClearRange(first, last);
  }
  return Real().close_range(first, last, flags);
}

extern "C" void fanstore_closefrom(int lowfd) noexcept {
  if (!t_in_wrapper && lowfd >= 0 && !InVforkChild()) {
    ForgetLocalRootFd(static_cast<unsigned>(lowfd), ~0u);
    g_fds.ClearRange(static_cast<unsigned>(lowfd), ~0u);
  }
  Real().closefrom(lowfd);
}

extern "C" int fanstore_dup(int fd) noexcept {
  int r = Real().dup(fd);
  if (r >= 0 && !t_in_wrapper) CopySlot(fd, r);
  return r;
}

extern "C" int fanstore_dup2(int oldfd, int newfd) noexcept {
  int r = Real().dup2(oldfd, newfd);
  if (r >= 0 && oldfd != newfd && !t_in_wrapper) CopySlot(oldfd, newfd);
  return r;
}

extern "C" int fanstore_dup3(int oldfd, int newfd, int flags) noexcept {
  int r = Real().dup3(oldfd, newfd, flags);
  if (r >= 0 && !t_in_wrapper) CopySlot(oldfd, newfd);
  return r;
}

namespace {

// F_GETFL of a FanStore descriptor: without the O_NOATIME the library adds to local copies
// (OpenLocalCopy), unless the program asked for it, at open or by F_SETFL.
int AfterFcntl(int fd, int cmd, void* arg, int r) {
  if (r < 0 || t_in_wrapper) return r;
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) CopySlot(fd, r);
  const uint64_t slot = g_fds.Get(fd);
  if (!FdTable::IsEntry(slot)) return r;
  if (cmd == F_GETFL && !(slot & FdTable::kNoatimeBit)) r &= ~O_NOATIME;
  if (cmd == F_SETFL)
    g_fds.Track(fd, FdTable::EntryOf(slot), reinterpret_cast<intptr_t>(arg) & O_NOATIME);
  return r;
}

}  // namespace

// The third argument is read as a pointer, as glibc's own fcntl does: every command's
// argument fits in one register.
extern "C" int fanstore_fcntl(int fd, int cmd, ...) noexcept {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return AfterFcntl(fd, cmd, arg, Real().fcntl(fd, cmd, arg));
}

extern "C" int fanstore_fcntl64(int fd, int cmd, ...) noexcept {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return AfterFcntl(fd, cmd, arg, Real().fcntl64(fd, cmd, arg));
}
