// The interceptor's configuration and process-wide state: initialisation from the environment,
// logging, the descriptor table and the local root's descriptor. See state.h.
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
  pthread_atfork(nullptr, nullptr, AtForkChild);
  g_active = true;
  FS_ILOG(1, "active: mount %s, table %s (%u entries), local root '%s', agent '%s'", g_cfg.mount,
          table_path, table->size(), g_cfg.local_root, g_cfg.socket);
}

// Runs before main for every process the library is preloaded into.
__attribute__((constructor)) void OnLoad() noexcept { (void)Active(); }

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

const table::Entry* TrackedEntry(int fd) noexcept {
  uint64_t slot = g_fds.Get(fd);
  if (!FdTable::IsEntry(slot)) return nullptr;
  uint32_t i = FdTable::EntryOf(slot);
  return i < Table().size() ? &Table().at(i) : nullptr;
}

int TrackNew(int fd, const table::Entry& e, int flags) noexcept {
  // No vfork check here: between vfork and exec only exec-preparation calls are allowed, and
  // a stray record is cleared by the parent's next pass-through open of that number.
  RealFD owned(fd);
  if (!g_fds.Track(fd, Table().IndexOf(e), flags & O_NOATIME)) return -EMFILE;
  return owned.Release();
}

int LocalRootFd() noexcept { return g_root_fd.load(std::memory_order_relaxed); }

void ForgetLocalRootFd(unsigned first, unsigned last) noexcept {
  int fd = g_root_fd.load(std::memory_order_relaxed);
  if (fd >= 0 && static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last)
    g_root_fd.compare_exchange_strong(fd, -1);  // never closed by us: the number is not ours now
}

}  // namespace fanstore::interceptor
