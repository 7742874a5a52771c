// Interceptor state: initialisation from the environment, logging, the working directory
// word and path location.
#include "interceptor/state.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "common/env.h"
#include "common/hash.h"
#include "common/text.h"

namespace fanstore::interceptor {

namespace {
std::atomic<int> g_root_fd{-1};  // see LocalRootFd()
}  // namespace

Config g_cfg;
constinit FdTable g_fds;
thread_local bool t_in_wrapper __attribute__((tls_model("initial-exec"))) = false;

namespace {

// Storage for objects that must never be destroyed (wrappers may run after exit handlers).
alignas(table::TableView) unsigned char g_table_storage[sizeof(table::TableView)];
alignas(Resolver) unsigned char g_resolver_storage[sizeof(Resolver)];
const Resolver* g_ns = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
bool g_active = false;
pid_t g_pid = 0;
std::atomic<uint64_t> g_cwd{0};  // (CwdKind << 32) | value

void AtForkChild() { g_pid = getpid(); }

bool Truthy(const char* v) { return v && *v && strcmp(v, "0") != 0; }

// FANSTORE_LOG = LEVEL[:FILE]; LEVEL is 1/info or 2/debug (anything else non-empty: 1).
void ConfigureLog() {
  g_cfg.log_level = 0;
  g_cfg.log_fd = STDERR_FILENO;
  const char* v = getenv(env::kLog);
  if (!Truthy(v)) return;
  g_cfg.log_level = (strncmp(v, "2", 1) == 0 || strncmp(v, "debug", 5) == 0) ? 2 : 1;
  if (const char* colon = strchr(v, ':'); colon && colon[1] == '/') {
    int fd = Real().open(colon + 1, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) g_cfg.log_fd = fd;
  }
}

bool CopyString(const char* src, char* dst, size_t cap) {
  size_t n = strlen(src);
  if (n >= cap) return false;
  memcpy(dst, src, n + 1);
  return true;
}

void Init() {
  Guard guard;
  g_pid = getpid();
  if (Truthy(getenv(env::kDisable))) return;
  const char* mount = getenv(env::kMount);
  const char* table_path = getenv(env::kTable);
  if (!mount || !*mount || !table_path || !*table_path) return;
  ConfigureLog();
  if (!NormalizeMount(mount, g_cfg.mount)) {
    FS_ILOG(1, "%s='%s' is not an absolute directory path; inactive", env::kMount, mount);
    return;
  }
  g_cfg.mount_len = strlen(g_cfg.mount);

  auto* table = new (g_table_storage) table::TableView();
  Status s = table->Open(table_path, /*check_entries=*/false);
  if (!s.ok()) {
    FS_ILOG(1, "cannot open the metadata table: %s; inactive", s.ToString().c_str());
    return;
  }
  std::string_view root = table->LocalRoot();
  if (!root.empty() && root.size() < PATH_MAX) {
    char tmp[PATH_MAX];
    memcpy(tmp, root.data(), root.size());
    tmp[root.size()] = '\0';
    if (!Real().realpath(tmp, g_cfg.local_root)) memcpy(g_cfg.local_root, tmp, root.size() + 1);
    g_cfg.local_root_len = strlen(g_cfg.local_root);
    while (g_cfg.local_root_len > 1 && g_cfg.local_root[g_cfg.local_root_len - 1] == '/')
      g_cfg.local_root[--g_cfg.local_root_len] = '\0';
    // Moved to a high number, away from the program's own small ones.
    RealFD fd(Real().open(g_cfg.local_root, O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (fd.valid()) {
      int high = Real().fcntl(fd.get(), F_DUPFD_CLOEXEC, 900);
      if (high >= 0) fd.Reset(high);
      g_root_fd.store(fd.Release(), std::memory_order_relaxed);
    }
  }
  {
    std::string dir(table_path);
    size_t slash = dir.rfind('/');
    g_cfg.counters =
        table::MapCounters(slash == std::string::npos ? "." : dir.substr(0, slash), false);
  }
  std::string_view cache = table->CacheRoot();
  if (!cache.empty() && cache.size() + 18 < PATH_MAX) {
    memcpy(g_cfg.cache_root, cache.data(), cache.size());
    g_cfg.cache_root[cache.size()] = '\0';
    g_cfg.cache_root_len = cache.size();
  }
  if (const char* sock = getenv(env::kSocket);
      sock && !CopyString(sock, g_cfg.socket, sizeof g_cfg.socket))
    FS_ILOG(1, "%s is too long for a Unix socket path; remote opens will fail", env::kSocket);
  if (const char* kv = getenv(env::kKernelView)) g_cfg.kernel_view = strcmp(kv, "on") == 0;
  g_cfg.open_timeout_ms = kDefaultOpenTimeoutMs;
  if (const char* t = getenv(env::kOpenTimeoutMs); t && *t) {
    if (auto ms = ParseInt(t, 0, 24L * 3600 * 1000))
      g_cfg.open_timeout_ms = static_cast<int>(*ms);
    else
      FS_ILOG(1, "%s='%s' is not a number of milliseconds up to a day; using %d",
              env::kOpenTimeoutMs, t, kDefaultOpenTimeoutMs);
  }
  g_ns = new (g_resolver_storage) Resolver(table, Mount());
  g_cwd.store(0, std::memory_order_relaxed);  // kUnknown: computed on first relative path
  pthread_atfork(nullptr, nullptr, AtForkChild);
  g_active = true;
  FS_ILOG(1, "active: mount %s, table %s (%u entries), local root '%s', agent '%s'", g_cfg.mount,
          table_path, table->size(), g_cfg.local_root, g_cfg.socket);
}

// Runs before main for every process the library is preloaded into.
__attribute__((constructor)) void OnLoad() noexcept { (void)Active(); }

// The cwd word for a real directory path (a getcwd result).
uint64_t ClassifyRealDir(const char* dir) {
  auto pack = [](CwdKind k, uint32_t v) { return (uint64_t{static_cast<uint32_t>(k)} << 32) | v; };
  std::string_view d(dir);
  const table::TableView& t = Table();
  // Inside the local root (a process started in a directory the interceptor chdir'ed to) or
  // inside a real directory at the mount path: the corresponding virtual directory.
  for (std::string_view base :
       {std::string_view(g_cfg.local_root, g_cfg.local_root_len), Mount()}) {
    if (base.empty() || d.substr(0, base.size()) != base) continue;
    if (d.size() == base.size()) return pack(CwdKind::kVirtual, 0);
    if (d[base.size()] != '/') continue;
    const table::Entry* e = t.Lookup(d.substr(base.size() + 1));
    if (e && table::IsDir(*e)) return pack(CwdKind::kVirtual, t.IndexOf(*e));
  }
  int anc = AncestorLength(Mount(), d);
  if (anc > 0) return pack(CwdKind::kAncestor, static_cast<uint32_t>(anc));
  return pack(CwdKind::kOther, 0);
}

}  // namespace

bool Active() noexcept {
  pthread_once(&g_once, Init);
  return g_active;
}

const Resolver& Ns() noexcept { return *g_ns; }

#if !FANSTORE_VFORK_WRAPPER
bool InVforkChild() noexcept { return getpid() != g_pid; }
#endif

void Log(int level, const char* fmt, ...) noexcept {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "fanstore-preload[%d]: %s", static_cast<int>(getpid()),
                   level >= 2 ? "debug: " : "");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(m, sizeof buf - n - 2));
  buf[len++] = '\n';
  ssize_t ignored = write(g_cfg.log_fd, buf, len);
  (void)ignored;
}

Cwd LoadCwd() noexcept {
  uint64_t v = g_cwd.load(std::memory_order_acquire);
  if (static_cast<CwdKind>(v >> 32) == CwdKind::kUnknown) {
    char buf[PATH_MAX];
    uint64_t fresh = Real().getcwd(buf, sizeof buf)
                         ? ClassifyRealDir(buf)
                         : uint64_t{static_cast<uint32_t>(CwdKind::kOther)} << 32;
    // A concurrent chdir wins over this (older) observation.
    if (g_cwd.compare_exchange_strong(v, fresh, std::memory_order_acq_rel)) v = fresh;
  }
  return {static_cast<CwdKind>(v >> 32), static_cast<uint32_t>(v)};
}

uint64_t CwdAfterRealChdir(const char* path) noexcept {
  const uint64_t unknown = 0;
  if (!path) return unknown;
  int anc = RealAncestorLength(AT_FDCWD, path);
  if (anc > 0)
    return (uint64_t{static_cast<uint32_t>(CwdKind::kAncestor)} << 32) | static_cast<uint32_t>(anc);
  if (path[0] != '/') return unknown;
  // A plain absolute path can be classified without asking the kernel: normalise "//" and
  // trailing slashes; "." and ".." (and symlinks, which we do not see) are left to getcwd.
  char norm[PATH_MAX];
  size_t n = 0;
  for (const char* p = path; *p;) {
    while (*p == '/') p++;
    if (!*p) break;
    const char* end = p;
    while (*end && *end != '/') end++;
    size_t len = static_cast<size_t>(end - p);
    if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) return unknown;
    if (n + 1 + len >= sizeof norm) return unknown;
    norm[n++] = '/';
    memcpy(norm + n, p, len);
    n += len;
    p = end;
  }
  if (n == 0) norm[n++] = '/';
  norm[n] = '\0';
  return ClassifyRealDir(norm);
}

void StoreCwdWord(uint64_t word) noexcept { g_cwd.store(word, std::memory_order_release); }

void StoreCwd(CwdKind kind, uint32_t value) noexcept {
  g_cwd.store((uint64_t{static_cast<uint32_t>(kind)} << 32) | value, std::memory_order_release);
}

bool MaybeOurs(int dirfd, const char* path) noexcept {
  if (!path) return false;
  if (path[0] == '/')
    return UnderMount(Mount(), path) != nullptr || UnderMountSpelled(Mount(), path) != nullptr;
  if (dirfd == AT_FDCWD)
    return static_cast<CwdKind>(g_cwd.load(std::memory_order_relaxed) >> 32) != CwdKind::kOther;
  return g_fds.Get(dirfd) != 0;
}

const table::Entry* TrackedEntry(int fd) noexcept {
  uint64_t slot = g_fds.Get(fd);
  if (!FdTable::IsEntry(slot)) return nullptr;
  uint32_t i = FdTable::EntryOf(slot);
  return i < Table().size() ? &Table().at(i) : nullptr;
}

namespace {

bool InGroup(gid_t gid, bool effective) {
  if (gid == (effective ? getegid() : getgid())) return true;
  gid_t groups[256];
  int n = getgroups(256, groups);
  for (int i = 0; i < n; i++)
    if (groups[i] == gid) return true;
  return false;
}

// The kernel needs search (x) permission on every directory a path crosses. Checked along the
// parents of what the walk reached (the directories a canonical path crosses); nothing to ask
// (no system call) when every class may search them, as datasets' directories usually allow.
void CheckSearch(Walk* w) noexcept {
  const table::TableView& t = Table();
  const table::Entry* d = nullptr;
  if (w->err == 0 && w->entry && &t.at(w->entry->parent) != w->entry)
    d = &t.at(w->entry->parent);
  else if (w->err == ENOENT && w->parent)
    d = w->parent;
  for (uint32_t depth = 0; d && depth < t.size(); depth++) {
    if ((d->mode & 0111) != 0111 && !Permitted(*d, X_OK)) {
      w->err = EACCES;
      w->entry = w->parent = nullptr;
      return;
    }
    const table::Entry* up = &t.at(d->parent);
    d = up == d ? nullptr : up;
  }
}

}  // namespace

bool Permitted(const table::Entry& e, int mode, bool effective) noexcept {
  const unsigned need = static_cast<unsigned>(mode) & 7;
  // Bits every class of user has need no question about who asks (a system call here).
  if (((e.mode >> 6) & (e.mode >> 3) & e.mode & need) == need) return true;
  const table::Header& h = Table().header();
  uid_t uid = effective ? geteuid() : getuid();
  if (uid == 0) {
    bool any_x = table::IsDir(e) || (e.mode & 0111);
    return !(need & X_OK) || any_x;
  }
  unsigned perm = uid == h.uid                ? (e.mode >> 6) & 7
                  : InGroup(h.gid, effective) ? (e.mode >> 3) & 7
                                              : e.mode & 7;
  return (perm & need) == need;
}

Located Locate(int dirfd, const char* path, bool follow_last, bool empty_path,
               PathScratch* scratch) noexcept {
  Located loc;
  const table::TableView& t = Table();
  for (int hop = 0; hop < 16; hop++) {
    const table::Entry* start = nullptr;
    const char* rel = nullptr;
    if (path[0] == '/') {
      rel = UnderMount(Mount(), path);
      if (!rel) rel = UnderMountSpelled(Mount(), path);
      if (rel) start = &t.at(0);
    } else if (path[0] == '\0') {
      if (empty_path) {
        rel = path;
        if (dirfd == AT_FDCWD) {
          Cwd c = LoadCwd();
          if (c.kind == CwdKind::kVirtual) start = &t.at(c.value);
        } else {
          start = TrackedEntry(dirfd);
        }
        if (start) {  // the descriptor itself, whatever its type
          loc.virt = true;
          loc.walk.entry = start;
          return loc;
        }
      }
    } else if (dirfd == AT_FDCWD) {
      Cwd c = LoadCwd();
      if (c.kind == CwdKind::kVirtual) {
        start = &t.at(c.value);
        rel = path;
      } else if (c.kind == CwdKind::kAncestor) {
        rel = EntersFromAncestor(Mount(), static_cast<int>(c.value), path);
        if (rel) start = &t.at(0);
      }
    } else if (uint64_t slot = g_fds.Get(dirfd); FdTable::IsAncestor(slot)) {
      rel = EntersFromAncestor(Mount(), static_cast<int>(FdTable::AncestorLength(slot)), path);
      if (rel) start = &t.at(0);
    } else if (const table::Entry* d = TrackedEntry(dirfd)) {
      if (!table::IsDir(*d)) {
        loc.virt = true;
        loc.walk.err = ENOTDIR;
        return loc;
      }
      start = d;
      rel = path;
    }
    if (!start) {
      loc.virt = false;
      loc.dirfd = dirfd;
      loc.path = path;
      return loc;
    }
    if (hop == 0 && strnlen(path, PATH_MAX) >= PATH_MAX) {  // the kernel's first check
      loc.virt = true;
      loc.walk = Walk();
      loc.walk.err = ENAMETOOLONG;
      return loc;
    }
    char* out = scratch->buf[hop & 1];
    loc.walk = Ns().Resolve(*start, rel, follow_last, out);
    if (!loc.walk.escaped) {
      loc.virt = true;
      CheckSearch(&loc.walk);
      return loc;
    }
    path = out;
    dirfd = AT_FDCWD;
    empty_path = false;
  }
  loc.virt = true;
  loc.walk = Walk();
  loc.walk.err = ELOOP;
  return loc;
}

int RealAncestorLength(int dirfd, const char* path) noexcept {
  if (!path || !*path) return -1;  // "" names nothing (AT_EMPTY_PATH is the caller's business)
  const std::string_view mount = Mount();
  size_t pos;  // the directory so far is mount[0, pos); 0 stands for "/"
  if (path[0] == '/') {
    pos = 0;
  } else {
    uint64_t base;
    if (dirfd == AT_FDCWD) {
      uint64_t cwd = g_cwd.load(std::memory_order_relaxed);
      if (static_cast<CwdKind>(cwd >> 32) != CwdKind::kAncestor) return -1;
      base = static_cast<uint32_t>(cwd);
    } else {
      uint64_t slot = g_fds.Get(dirfd);
      if (!FdTable::IsAncestor(slot)) return -1;
      base = FdTable::AncestorLength(slot);
    }
    pos = base == 1 ? 0 : base;
  }
  const char* p = path;
  while (true) {
    while (*p == '/') p++;
    if (!*p) break;
    const char* end = p;
    while (*end && *end != '/') end++;
    size_t len = static_cast<size_t>(end - p);
    if (len == 1 && p[0] == '.') {
      // stays
    } else if (len == 2 && p[0] == '.' && p[1] == '.') {
      size_t slash = pos == 0 ? 0 : mount.rfind('/', pos - 1);
      pos = slash == std::string_view::npos ? 0 : slash;
    } else {
      // The component must be the mount's next one, and not its last (that is the mount).
      if (pos + 1 + len >= mount.size() || mount.compare(pos + 1, len, p, len) != 0 ||
          mount[pos + 1 + len] != '/')
        return -1;
      pos += 1 + len;
    }
    p = end;
  }
  return pos == 0 ? 1 : static_cast<int>(pos);
}

void FillAncestorStat(int length, struct stat* st) noexcept {
  const table::TableView& t = Table();
  t.FillStat(t.at(0), st);
  st->st_ino =
      table::InodeFor(Xxh3(Mount().substr(0, static_cast<size_t>(length))) ^ 0x5a5a5a5a5a5a5a5aULL);
  st->st_mode = S_IFDIR | 0555;
  st->st_nlink = 3;
  st->st_uid = 0;
  st->st_gid = 0;
}

void AfterRealOpen(int dirfd, const char* path, int fd) noexcept {
  if (fd < 0) return;
  int anc = RealAncestorLength(dirfd, path);
  if (anc > 0) {
    if (!InVforkChild()) g_fds.TrackAncestor(fd, static_cast<uint32_t>(anc));
  } else {
    ForgetStale(fd);
  }
}

bool CachePath(const table::Entry& e, char* out) noexcept {
  if (!g_cfg.cache_root_len) return false;
  memcpy(out, g_cfg.cache_root, g_cfg.cache_root_len);
  out[g_cfg.cache_root_len] = '/';
  table::CacheName(e.hash, out + g_cfg.cache_root_len + 1);
  out[g_cfg.cache_root_len + 17] = '\0';
  return true;
}

int LocalRootFd() noexcept { return g_root_fd.load(std::memory_order_relaxed); }

void ForgetLocalRootFd(unsigned first, unsigned last) noexcept {
  int fd = g_root_fd.load(std::memory_order_relaxed);
  if (fd >= 0 && static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last)
    g_root_fd.compare_exchange_strong(fd, -1);  // never closed by us: the number is not ours now
}

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

}  // namespace

// Set once the local tree refuses our files (the job's read-only view of it, docs/security.md):
// from then on this process asks the agent at once.
std::atomic<bool> g_no_self_unpack{false};

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
    if (!CopyRange(src, static_cast<loff_t>(e.child_count), tmp, e.size)) {
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

bool StandInPath(const table::Entry& dir, char* out) noexcept {
  return g_cfg.kernel_view ? Ns().AbsolutePath(dir, out, PATH_MAX) > 0 : LocalPath(dir, out);
}

const table::Entry* FdLinkEntry(const char* path) noexcept {
  if (!path || path[0] != '/' || (path[1] != 'p' && path[1] != 'd') || !Intercepting())
    return nullptr;
  const char* n = nullptr;
  if (strncmp(path, "/proc/self/fd/", 14) == 0) {
    n = path + 14;
  } else if (strncmp(path, "/proc/thread-self/fd/", 21) == 0) {  // threads share descriptors
    n = path + 21;
  } else if (strncmp(path, "/dev/fd/", 8) == 0) {
    n = path + 8;
  } else if (strncmp(path, "/proc/", 6) == 0) {
    char own[32];
    const int k = snprintf(own, sizeof own, "/proc/%d/fd/", static_cast<int>(getpid()));
    if (strncmp(path, own, static_cast<size_t>(k)) == 0) n = path + k;
  }
  if (!n || *n < '0' || *n > '9') return nullptr;
  char* end = nullptr;
  const long fd = strtol(n, &end, 10);
  if (*end || fd > INT_MAX) return nullptr;
  return TrackedEntry(static_cast<int>(fd));
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

int TrackNew(int fd, const table::Entry& e, int flags) noexcept {
  // No vfork check here: between vfork and exec only exec-preparation calls are allowed, and
  // a stray record is cleared by the parent's next pass-through open of that number.
  RealFD owned(fd);
  if (!g_fds.Track(fd, Table().IndexOf(e), flags & O_NOATIME)) return -EMFILE;
  return owned.Release();
}

}  // namespace fanstore::interceptor
