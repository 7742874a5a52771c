// The interceptor's configuration and process-wide state: the configuration read once from
// the environment, the mapped metadata table and its resolver, logging, the re-entry guard,
// the vfork check, the descriptors the library keeps (the descriptor table and the local
// root's descriptor), and the wrappers' errno helper. Which paths are ours is decided in
// locate.h; a file's bytes come from local_files.h.
//
// Lifetime: initialised by the library constructor, or by the first wrapper called if that
// comes earlier (another library's constructor). Never destroyed: wrappers may run during and
// after exit handlers. When FANSTORE_MOUNT or FANSTORE_TABLE is unset, FANSTORE_DISABLE is
// set, or the table cannot be opened, the library is inert: every wrapper calls libc at once.
//
// Thread safety: immutable after initialisation, except the descriptor table and the local
// root's descriptor, which are atomics.
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

// ---- Descriptors -------------------------------------------------------------------------
// The entry a tracked descriptor refers to, or nullptr.
const table::Entry* TrackedEntry(int fd) noexcept;

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
