#include "interceptor/orphan.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "common/env.h"
#include "interceptor/local_files.h"
#include "interceptor/state.h"

extern char** environ;

namespace fanstore::interceptor {
namespace {

std::atomic<bool> g_warned{false};

void WarnOnce(std::string_view dataset) {
  if (g_warned.exchange(true)) return;
  char msg[PATH_MAX + 200];
  int n = snprintf(
      msg, sizeof msg,
      "fanstore: this node's agent is gone; files not staged here are read from the dataset %.*s\n",
      static_cast<int>(dataset.size()), dataset.data());
  if (n > 0)
    (void)!::write(STDERR_FILENO, msg,
                   static_cast<size_t>(n) < sizeof msg ? static_cast<size_t>(n) : sizeof msg - 1);
}

// The program's environment without the preload library: the reader must not intercept.
// Returns the number of entries written to out (at most cap - 2, then the disable flag, then null).
size_t ChildEnv(char** out, size_t cap, char* disable) {
  size_t n = 0;
  for (char** e = environ; e && *e && n + 2 < cap; e++)
    if (strncmp(*e, env::kLdPreload, sizeof env::kLdPreload - 1) != 0 ||
        (*e)[sizeof env::kLdPreload - 1] != '=')
      out[n++] = *e;
  out[n++] = disable;
  out[n] = nullptr;
  return n;
}

}  // namespace

int OpenWithoutAgent(const table::Entry& e, int keep) noexcept {
  const table::TableView& t = Table();
  WarnOnce(t.Dataset());
  const uint32_t eflags = table::EntryFlagsOf(e);
  if (eflags & table::kLocal) {
    int fd = OpenLocalCopy(e, keep);
    if (fd >= 0 || fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM) return fd;
  }
  if (int fd = OpenCachedCopy(e, O_CLOEXEC | keep); fd >= 0) return fd;
  uint32_t shard, index;
  const std::string_view tool = t.Tool(), dataset = t.Dataset();
  if (!t.Source(e, &shard, &index) || tool.empty() || dataset.empty() || tool.size() >= PATH_MAX ||
      dataset.size() >= PATH_MAX)
    return -ESTALE;
  RealFD fd(::memfd_create("fanstore-orphan", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return -errno;
  char tool_s[PATH_MAX], dataset_s[PATH_MAX], shard_s[16], index_s[16];
  snprintf(tool_s, sizeof tool_s, "%.*s", static_cast<int>(tool.size()), tool.data());
  snprintf(dataset_s, sizeof dataset_s, "%.*s", static_cast<int>(dataset.size()), dataset.data());
  snprintf(shard_s, sizeof shard_s, "%u", shard);
  snprintf(index_s, sizeof index_s, "%u", index);
  char mode[] = "--read-entry";
  char* argv[] = {tool_s, mode, dataset_s, shard_s, index_s, nullptr};
  char disable[64];
  snprintf(disable, sizeof disable, "%s=1", env::kDisable);
  char* envp[512];
  ChildEnv(envp, sizeof envp / sizeof envp[0], disable);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd.get(), STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, tool_s, &fa, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  if (rc == 0) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  const int code = rc != 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0 || static_cast<uint64_t>(::lseek(fd.get(), 0, SEEK_END)) != e.size)
    return code == 4 ? -EIO : -ESTALE;  // damaged bytes, or no dataset to read
  ::lseek(fd.get(), 0, SEEK_SET);
  ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd.Release();
}

}  // namespace fanstore::interceptor
