// Locating paths: whether a (dirfd, path) pair is the library's to answer and what it names,
// the working-directory word that relative paths start from, the kernel's permission checks
// along a walk, and the real directories above the mount. See locate.h.
#include "interceptor/locate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "common/hash.h"
#include "interceptor/state.h"

namespace fanstore::interceptor {
namespace {

std::atomic<uint64_t> g_cwd{0};  // (CwdKind << 32) | value

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
  // A plain absolute path can be classified without asking the kernel, once "//" and trailing
  // slashes are normalised; "." and ".." (and symlinks, which we do not see) are left to getcwd.
  char norm[PATH_MAX];
  return NormalizeAbsolute(path, /*drop_dots=*/false, norm) ? ClassifyRealDir(norm) : unknown;
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
  PathTokenizer tokens(path);
  for (PathComponent c; tokens.Next(&c);) {
    if (c.kind == LastKind::kDot) continue;
    if (c.kind == LastKind::kDotDot) {
      size_t slash = pos == 0 ? 0 : mount.rfind('/', pos - 1);
      pos = slash == std::string_view::npos ? 0 : slash;
      continue;
    }
    // The component must be the mount's next one, and not its last (that is the mount).
    const size_t len = c.name.size();
    if (pos + 1 + len >= mount.size() || mount.compare(pos + 1, len, c.name) != 0 ||
        mount[pos + 1 + len] != '/')
      return -1;
    pos += 1 + len;
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

}  // namespace fanstore::interceptor
