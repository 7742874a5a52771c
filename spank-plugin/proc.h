// Processes and files for the plugin: starting the agent step as the job user, asking squeue,
// finding and ending an agent's processes, and removing a job's directories without following
// symlinks.
//
// Slurm's processes are multi-threaded, so every function that forks prepares all its memory first
// and the child calls only async-signal-safe functions before exec (or before _exit).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/remove_tree.h"
#include "common/status.h"

namespace fanstore::spank {

// The job user. A child given credentials becomes that user completely (supplementary groups, real,
// effective and saved ids) before it runs anything: in slurm_spank_user_init the caller has ruid 0
// and euid user, and a shell started without this would go back to euid 0.
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  // Soft limits to apply before exec (resource, value): the job's, which Slurm passes as
  // SLURM_RLIMIT_* (slurmstepd's own are root's).
  std::vector<std::pair<int, rlim_t>> limits;
};

// The job's soft resource limits from its environment (SLURM_RLIMIT_NOFILE=1024, ...); values
// that are not numbers are skipped.
std::vector<std::pair<int, rlim_t>> JobLimits(const std::vector<std::string>& env);
// Lowers (never raises above the hard limit) this process's soft limits to `limits`.
void ApplyLimits(const std::vector<std::pair<int, rlim_t>>& limits);

// Starts argv with exactly env, in a new session, stdin from /dev/null and stdout/stderr appended
// to out_path (created 0600 by the child, so as the job user when creds is given) or /dev/null if
// empty. creds == nullptr keeps the caller's identity. Returns the child's pid; the caller reaps
// it.
[[nodiscard]] Result<pid_t> Spawn(const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env, const Credentials* creds,
                                  const std::string& out_path);

// srun and salloc: starts argv under a small supervisor process that outlives the calling srun,
// unless another live supervisor of the same job already holds lock_path. The supervisor writes its
// pid to lock_path (atomically, with link), runs argv with its output in log_path, and removes both
// files when argv ends, i.e. when the job ends. Returns true if it started argv, false if a live
// supervisor already existed. A lock whose supervisor is gone is taken over.
[[nodiscard]] Result<bool> SpawnSupervised(const std::vector<std::string>& argv,
                                           const std::vector<std::string>& env,
                                           const std::string& lock_path,
                                           const std::string& log_path);

// Runs argv as creds (or as the caller), with env, and returns its exit status (-1 if killed) and
// up to 64 KiB of its stdout. The child is killed after timeout_ms.
[[nodiscard]] Result<int> RunCapture(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& env, const Credentials* creds,
                                     int timeout_ms, std::string* out);

// Forks, becomes creds in the child, runs fn there and returns its result (the child's exit
// status); -1 if the child was killed, including after timeout_ms.
[[nodiscard]] Result<int> RunAsUser(const Credentials& creds, int timeout_ms,
                                    const std::function<int()>& fn);

// The state letter of /proc/PID/stat ('R', 'S', 'Z', ...) or '\0' when the process is gone.
char ProcessState(pid_t pid);
// Exists and is neither a zombie nor dead. PID 1 may reap late, so kill(pid, 0) is not enough.
bool ProcessAlive(pid_t pid);
// Live processes of uid whose environment holds every one of the `KEY=VALUE` entries.
std::vector<pid_t> FindProcesses(uid_t uid, const std::vector<std::string>& env_entries);
// SIGTERM, up to grace_ms for them to go, then SIGKILL and up to kill_ms for the rest. Returns
// those still alive then.
std::vector<pid_t> TerminateProcesses(const std::vector<pid_t>& pids, int grace_ms, int kill_ms);

using fanstore::RemoveTree;  // common/remove_tree.h

// The largest pid Linux hands out (PID_MAX_LIMIT - 1).
inline constexpr int64_t kMaxPid = (1 << 22) - 1;
// The pid a lock or pid file holds ("1234\n"), or -1 when it is missing or holds anything else.
pid_t ReadPidFile(const std::string& path);
// The last max_lines lines of a file (within its last `window` bytes), "" if unreadable. Root
// reads users' logs with it: never through a symlink, only a regular file owned by `owner`.
std::string TailOfFile(const std::string& path, int max_lines, uid_t owner,
                       size_t window = 64 << 10);

}  // namespace fanstore::spank
