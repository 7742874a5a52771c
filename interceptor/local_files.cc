// The real files behind the mount on this node: where a file's bytes come from (its staged
// copy under the local root, this node's shard copy unpacked by the process itself, the
// agent's cache of files fetched from peers), and the real directories that stand in for
// virtual ones. See local_files.h.
#include "interceptor/local_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "interceptor/state.h"

namespace fanstore::interceptor {

namespace {

// Writes <local root>/<path of e> into out[PATH_MAX]; false without a local root or when it
// does not fit.
bool LocalPath(const table::Entry& e, char* out) noexcept {
  if (!g_cfg.local_root_len) return false;
  std::string_view rel = Table().Path(e);
  size_t n = g_cfg.local_root_len + (rel.empty() ? 0 : 1 + rel.size());
  if (n >= PATH_MAX) return false;
  memcpy(out, g_cfg.local_root, g_cfg.local_root_len);
  if (!rel.empty()) {
    out[g_cfg.local_root_len] = '/';
    memcpy(out + g_cfg.local_root_len + 1, rel.data(), rel.size());
  }
  out[n] = '\0';
  return true;
}

// <cache root>/<CacheName(e.hash)>: where the agent keeps e once fetched from a peer.
bool CachePath(const table::Entry& e, char* out) noexcept {
  if (!g_cfg.cache_root_len) return false;
  memcpy(out, g_cfg.cache_root, g_cfg.cache_root_len);
  out[g_cfg.cache_root_len] = '/';
  table::CacheName(e.hash, out + g_cfg.cache_root_len + 1);
  out[g_cfg.cache_root_len + 17] = '\0';
  return true;
}

}  // namespace

int OpenLocalCopy(const table::Entry& e, int flags) noexcept {
  char path[PATH_MAX];
  const int rfd = LocalRootFd();
  std::string_view rel = Table().Path(e);
  const bool relative = rfd >= 0 && !rel.empty() && rel.size() < PATH_MAX;
  if (relative) {
    memcpy(path, rel.data(), rel.size());
    path[rel.size()] = '\0';
  } else if (!LocalPath(e, path)) {
    return -ENOENT;
  }
  auto open_it = [&](int f) {
    return relative ? Real().openat(rfd, path, f) : Real().open(path, f);
  };
  // O_NOATIME: the agent's copies are the job user's own, and a first read would otherwise
  // write each one's inode (its atime is not after its mtime). F_GETFL hides the flag
  // (fanstore_fcntl); O_DIRECT only when asked.
  int fd = open_it(O_RDONLY | O_NOATIME | flags);
  if (fd < 0 && errno == EPERM && !(flags & O_NOATIME)) fd = open_it(O_RDONLY | flags);
  if (fd < 0 && relative && (errno == EBADF || errno == ENOTDIR)) {
    ForgetLocalRootFd(static_cast<unsigned>(rfd),
                      static_cast<unsigned>(rfd));  // closed behind our back
    return OpenLocalCopy(e, flags);
  }
  return fd >= 0 ? fd : -errno;
}

namespace {

// A copy that ended early (the source shorter than its entry says, or a write that wrote
// nothing): EIO, never whatever errno the program last left.
bool ShortCopy() noexcept {
  errno = EIO;
  return false;
}

// Copies n bytes at offset off of `src` to the start of `dst`; false with errno set when it
// cannot. A small file goes through a buffer (a pread and a write cost less than
// copy_file_range's splice for a few KB); a larger one is copied in the kernel where it can be.
bool CopyRange(int src, loff_t off, int dst, size_t n) noexcept {
  char buf[16384];
  bool in_kernel = n > sizeof buf;
  while (n > 0) {
    if (in_kernel) {
      ssize_t k = ::copy_file_range(src, &off, dst, nullptr, n, 0);
      if (k > 0) {
        n -= static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) return ShortCopy();
      if (errno != EXDEV && errno != ENOSYS && errno != EOPNOTSUPP && errno != EINVAL) return false;
      in_kernel = false;  // not here: through the buffer
    }
    ssize_t r = ::pread(src, buf, std::min(n, sizeof buf), off);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return ShortCopy();
    if (r < 0) return false;
    for (ssize_t w = 0; w < r;) {
      ssize_t x = ::write(dst, buf + w, static_cast<size_t>(r - w));
      if (x < 0 && errno == EINTR) continue;
      if (x == 0) return ShortCopy();
      if (x < 0) return false;
      w += x;
    }
    off += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Links the unnamed file tmp in as rfd/path; 0 or an errno. linkat(AT_EMPTY_PATH) needs no /proc
// lookup, and kernels from 6.10 allow it to the user who opened the file; older ones refuse it
// without CAP_DAC_READ_SEARCH (ENOENT). Where it is refused and /proc/self/fd then links the
// file, the process uses /proc/self/fd from then on (a refusal for another reason, a directory
// removed meanwhile, leaves both failing and changes nothing).
int LinkInto(int tmp, int rfd, const char* path) noexcept {
  static std::atomic<bool> no_empty_path{false};
  const bool tried = !no_empty_path.load(std::memory_order_relaxed);
  if (tried) {
    if (Real().linkat(tmp, "", rfd, path, AT_EMPTY_PATH) == 0) return 0;
    if (errno != ENOENT && errno != EPERM) return errno;
  }
  char self[40];
  snprintf(self, sizeof self, "/proc/self/fd/%d", tmp);
  if (Real().linkat(AT_FDCWD, self, rfd, path, AT_SYMLINK_FOLLOW) != 0) return errno;
  if (tried) no_empty_path.store(true, std::memory_order_relaxed);
  return 0;
}

// Set once the local tree refuses our files (the job's read-only view of it, docs/security.md):
// from then on this process asks the agent at once.
std::atomic<bool> g_no_self_unpack{false};

}  // namespace

int SelfUnpack(const table::Entry& e, int flags) noexcept {
  if (g_no_self_unpack.load(std::memory_order_relaxed)) return -EROFS;
  const int rfd = LocalRootFd();
  std::string_view rel = Table().Path(e);
  if (rfd < 0 || rel.empty() || rel.size() >= PATH_MAX) return -ENOENT;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "../%s/%u", table::kCopyDir, e.aux);  // see table::kCopyDir
  const int src = Real().openat(rfd, path, O_RDONLY | O_CLOEXEC);
  if (src < 0) {
    const int err = errno;
    if (err == EBADF || err == ENOTDIR)  // closed behind our back: as OpenLocalCopy does
      ForgetLocalRootFd(static_cast<unsigned>(rfd), static_cast<unsigned>(rfd));
    return -err;
  }
  // The unnamed file goes in the file's own directory (it exists under the local root).
  const size_t cut = rel.rfind('/');
  if (cut == std::string_view::npos) {
    path[0] = '.';
    path[1] = '\0';
  } else {
    memcpy(path, rel.data(), cut);
    path[cut] = '\0';
  }
  int err = 0;
  const int tmp = Real().openat(rfd, path, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0400);
  if (tmp < 0) {
    err = errno;
    if (err == EROFS || err == EACCES || err == EPERM)
      g_no_self_unpack.store(true, std::memory_order_relaxed);
  } else {
    if (!CopyRange(src, static_cast<loff_t>(table::RawCopyOffset(e)), tmp, e.size)) {
      err = errno;  // CopyRange sets it
    } else {
      memcpy(path, rel.data(), rel.size());
      path[rel.size()] = '\0';
      err = LinkInto(tmp, rfd, path);
    }
    Real().close(tmp);
  }
  Real().close(src);
  return err ? -err : OpenLocalCopy(e, flags);
}

int OpenCachedCopy(const table::Entry& e, int flags) noexcept {
  char path[PATH_MAX];
  if (!CachePath(e, path)) return -ENOENT;
  const int fd = Real().open(path, O_RDONLY | O_NOFOLLOW | flags);
  return fd >= 0 ? fd : -errno;
}

bool StandInPath(const table::Entry& dir, char* out) noexcept {
  return g_cfg.kernel_view ? Ns().AbsolutePath(dir, out, PATH_MAX) > 0 : LocalPath(dir, out);
}

int OpenDirStandIn(const table::Entry& dir, int flags) noexcept {
  const int cloexec = flags & O_CLOEXEC;
  const int oflags =
      (flags & O_PATH) ? (O_PATH | O_DIRECTORY | cloexec) : (O_RDONLY | O_DIRECTORY | cloexec);
  char path[PATH_MAX];
  if (g_cfg.kernel_view && StandInPath(dir, path)) {
    int fd = Real().open(path, oflags);
    if (fd >= 0) return fd;
  }
  if (LocalPath(dir, path)) {
    int fd = Real().open(path, oflags);
    if (fd >= 0) return fd;
    fd = Real().open(g_cfg.local_root, oflags);
    if (fd >= 0) return fd;
  }
  int fd = Real().open("/", O_PATH | O_DIRECTORY | cloexec);
  return fd >= 0 ? fd : -errno;
}

}  // namespace fanstore::interceptor
