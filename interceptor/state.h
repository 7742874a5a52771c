// The interceptor's process-wide state: configuration read once from the environment, the
// mapped metadata table, the working-directory state and the descriptor table; and Locate(),
// which decides whether a path is ours.
//
// Lifetime: initialised by the library constructor, or by the first wrapper called if that
// comes earlier (another library's constructor). Never destroyed: wrappers may run during and
// after exit handlers. When FANSTORE_MOUNT or FANSTORE_TABLE is unset, FANSTORE_DISABLE is
// set, or the table cannot be opened, the library is inert: every wrapper calls libc at once.
//
// Thread safety: immutable after initialisation, except the working-directory word and the
// descriptor table, which are atomics.
#pragma once

#include <errno.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#include "common/table.h"
#include "interceptor/fd_table.h"
#include "interceptor/real.h"
#include "interceptor/resolver.h"

namespace fanstore::interceptor {

// Default for env::kOpenTimeoutMs.
inline constexpr int kDefaultOpenTimeoutMs = 120000;

struct Config {
  char mount[PATH_MAX];
  size_t mount_len;
  char local_root[PATH_MAX];  // realpath of the table's local root; "" if none
  size_t local_root_len;
  char cache_root[PATH_MAX];  // the agent's cache of files fetched from peers; "" if none
  size_t cache_root_len;
  char socket[108];                 // the agent's socket; "" when none is configured
  table::ClientCounters* counters;  // shared open counters; nullptr when unavailable
  int open_timeout_ms;
  bool kernel_view;  // the dataset is also mounted at `mount` for the kernel (FUSE)
  int log_level;     // 0 silent, 1 errors and setup, 2 every intercepted call
  int log_fd;
};

extern Config g_cfg;
extern FdTable g_fds;

// True when the library intercepts in this process; initialises on first use.
bool Active() noexcept;
const Resolver& Ns() noexcept;
inline const table::TableView& Table() noexcept { return Ns().table(); }
inline std::string_view Mount() noexcept { return {g_cfg.mount, g_cfg.mount_len}; }

void Log(int level, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));
#define FS_ILOG(level, ...)                                  \
  do {                                                       \
    if (::fanstore::interceptor::g_cfg.log_level >= (level)) \
      ::fanstore::interceptor::Log((level), __VA_ARGS__);    \
  } while (0)

// Re-entry guard: set while the interceptor's own code runs (its calls into libc, and libc's
// calls back into exported symbols, must reach libc directly).
extern thread_local bool t_in_wrapper __attribute__((tls_model("initial-exec")));
class Guard {
 public:
  Guard() noexcept : prev_(t_in_wrapper) { t_in_wrapper = true; }
  ~Guard() { t_in_wrapper = prev_; }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool prev_;
};
// Lifts the guard around user callbacks (scandir filters, nftw functions).
class Unguard {
 public:
  Unguard() noexcept : prev_(t_in_wrapper) { t_in_wrapper = false; }
  ~Unguard() { t_in_wrapper = prev_; }
  Unguard(const Unguard&) = delete;
  Unguard& operator=(const Unguard&) = delete;

 private:
  bool prev_;
};

// Whether a wrapper should consider interception at all. False inside our own code and in
// inert processes.
inline bool Intercepting() noexcept { return !t_in_wrapper && Active(); }

// True between vfork and exec: the memory is the parent's, but the descriptor table is not,
// so the child must not touch descriptor or cwd state. On x86-64 the library's own vfork
// (vfork.cc) sets a thread-local flag, so this is one TLS load; elsewhere it compares
// getpid() with the pid recorded at init and after fork. (posix_spawn's clone child runs
// only glibc-internal calls, which no wrapper sees.)
#if defined(__x86_64__)
#define FANSTORE_VFORK_WRAPPER 1
}  // namespace fanstore::interceptor
extern "C" __attribute__((visibility("hidden"))) __thread bool fanstore_t_vfork_child
    __attribute__((tls_model("initial-exec")));
namespace fanstore::interceptor {
inline bool InVforkChild() noexcept { return fanstore_t_vfork_child; }
#else
#define FANSTORE_VFORK_WRAPPER 0
bool InVforkChild() noexcept;
#endif

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

// The entry a tracked descriptor refers to, or nullptr.
const table::Entry* TrackedEntry(int fd) noexcept;
// The entry behind /proc/self/fd/N, /proc/thread-self/fd/N, /proc/<own pid>/fd/N or /dev/fd/N when
// N is a tracked descriptor (the kernel would resolve those to the local copy), else nullptr.
const table::Entry* FdLinkEntry(const char* path) noexcept;

// Writes <local root>/<path of e> into out[PATH_MAX]; false without a local root or when it
// does not fit.
bool LocalPath(const table::Entry& e, char* out) noexcept;
// Where the kernel finds directory `dir` for programs the library does not reach (children's
// working directory, a directory descriptor's raw getdents64): the directory itself in the
// kernel-visible view when there is one, else LocalPath.
bool StandInPath(const table::Entry& dir, char* out) noexcept;
// Opens the local copy of regular file e read-only (flags: O_CLOEXEC and the like): relative
// to LocalRootFd() when there is one, else by LocalPath. Returns fd or -errno.
int OpenLocalCopy(const table::Entry& e, int flags) noexcept;
// Unpacks a table::kRawCopy file from this node's shard copy itself, about ten times as fast
// as asking the agent: an unnamed file in its directory, linked into place once complete (so
// nobody opens a partial file), then opened as OpenLocalCopy does. A negative errno when the
// copy is gone (the agent finished and removed it) or the name exists (the agent or another
// process is unpacking it): the caller then asks the agent, which knows.
int SelfUnpack(const table::Entry& e, int flags) noexcept;
// <cache root>/<CacheName(e.hash)>: where the agent keeps e once fetched from a peer.
bool CachePath(const table::Entry& e, char* out) noexcept;

// Opens a real descriptor standing for directory `dir`: the directory in the kernel-visible
// view, else <local root>/<path>, falling back to the local root itself, then to "/" (O_PATH).
// Attributes and listings of it are never read from the kernel. Returns fd (not yet tracked) or
// -errno.
int OpenDirStandIn(const table::Entry& dir, int flags) noexcept;

// Tracks fd as entry e. On failure closes fd and returns -EMFILE.
int TrackNew(int fd, const table::Entry& e, int flags = 0) noexcept;

// A descriptor of the local root (O_PATH, close-on-exec, a high number), or -1: local files
// are opened relative to it, which spares the kernel the root's own path components on every
// open (about 10 % of a small-file open here). The program may close it behind our back: the
// close, close_range, closefrom, dup2 and dup3 wrappers, and any open that returns its number,
// forget it (ForgetLocalRootFd), and opens fall back to the absolute path.
int LocalRootFd() noexcept;
void ForgetLocalRootFd(unsigned first, unsigned last) noexcept;

// A pass-through call produced descriptor fd: forget any stale record of that number.
inline void ForgetStale(int fd) noexcept {
  if (InVforkChild()) return;
  ForgetLocalRootFd(static_cast<unsigned>(fd), static_cast<unsigned>(fd));
  if (g_fds.Get(fd) != 0) g_fds.Take(fd);
}

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

// errno helpers: wrappers compute a result or -errno, then Finish() sets errno for failures
// and restores the caller's errno on success.
class ErrnoSaver {
 public:
  ErrnoSaver() noexcept : saved_(errno) {}
  long Finish(long r) const noexcept {
    if (r < 0) {
      errno = static_cast<int>(-r);
      return -1;
    }
    errno = saved_;
    return r;
  }
  void Restore() const noexcept { errno = saved_; }

 private:
  int saved_;
};

}  // namespace fanstore::interceptor
