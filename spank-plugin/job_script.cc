// Job-script context: slurm_spank_job_prolog and slurm_spank_job_epilog, as root on every node of
// the job. The epilog is the safety net of the teardown: whatever happened to the agents (crash,
// scancel, SIGKILL), it ends this job's leftover agent processes on this node and removes the job's
// run directory (socket, metadata table, status), local directory and launch files. The prolog does
// the same for stale leftovers of an earlier job with the same id (job ids restart when slurmctld
// starts clean). When local_dir is on tmpfs the prolog mounts a tmpfs of the job's own at its local
// directory and the epilog unmounts it (dirs.h MountJobFs), which takes seconds off the teardown
// at a million files.
//
// The cleanup runs in a child that has become the job user, so a symlink or a directory planted by
// the user can make it remove only what the user could remove anyway.
//
// Our option arrives here only as SPANK__SLURM_SPANK_OPTION_fanstore_fanstore in the environment;
// the options are not registered in this context (spank_option_getopt would then fail).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spank-plugin/dirs.h"
#include "spank-plugin/hooks.h"
#include "spank-plugin/plugin_state.h"

namespace fanstore::spank {
namespace {

constexpr int kCleanupTimeoutMs = 60000;
constexpr int kAgentGraceMs = 3000;

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Runs as the job user. Returns 0 when nothing of the job is left on this node.
int CleanNode(const Config& config, const JobIdentity& id, const char* phase) {
  const std::string run_dir = RunDir(config, id);
  const std::vector<std::string> marks = {std::string(kEnvAgentStep) + "=1",
                                          "SLURM_JOB_ID=" + std::to_string(id.job),
                                          "SLURMD_NODENAME=" + id.node};
  // The agents are found by their environment, which Slurm and the plugin set and no pid reuse can
  // fake: the agent step's marker, this job, this node (nodes may share one /proc in a test
  // cluster).
  const std::vector<pid_t> pids = FindProcesses(id.uid, marks);
  int rc = 0;
  if (!pids.empty()) {
    std::string list;
    for (pid_t p : pids) list += " " + std::to_string(p);
    LogInfo(phase, "ending leftover agent processes of job " + std::to_string(id.job) + ":" + list);
    TerminateProcesses(pids, kAgentGraceMs);
  }
  for (const std::string& path : {run_dir, LocalDir(config, id)}) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (IsMountPoint(path)) continue;  // the job's own tmpfs: root unmounts it whole after this
    if (st.st_uid != id.uid) {  // planted by someone else: not ours to remove, and in no one's way
      LogInfo(phase, path + " belongs to uid " + std::to_string(st.st_uid) +
                         ", not to the job's user: left alone");
      continue;
    }
    // Empty, as the agents leave the directories the prolog claimed (and the job's tmpfs
    // leaves its mount point): nothing to report.
    if (::rmdir(path.c_str()) == 0) continue;
    Status s = RemoveTree(path);
    if (!s.ok()) {
      LogError(phase, "cannot remove " + path + ": " + s.message());
      rc = 1;
    } else {
      LogInfo(phase, "removed " + path + " (left by an agent that did not clean up)");
    }
  }
  // The launch files of the batch step (or of a supervisor that died); a live supervisor removes
  // its own.
  const std::string lock = LaunchLock(config, id);
  const pid_t supervisor = ReadPidFile(lock);
  if (supervisor <= 0 || !ProcessAlive(supervisor)) {
    ::unlink(LaunchLog(config, id).c_str());
    ::unlink(lock.c_str());
    ::rmdir(LaunchDir(config, id).c_str());  // when no other job of the user's uses it
  }
  for (pid_t p : pids)
    if (ProcessAlive(p)) {
      LogError(phase, "agent process " + std::to_string(p) + " of job " + std::to_string(id.job) +
                          " survived SIGKILL");
      rc = 1;
    }
  return rc;
}

int Clean(spank_t sp, int ac, char** av, const char* phase) {
  if (LoadConfig(ac, av, phase) != 0) return -1;
  PluginState& s = State();
  auto id = GetJobIdentity(sp);
  if (!id.ok()) {
    LogError(phase, id.status().message());
    return -1;
  }
  const bool used = ProcessGetenv("SPANK__SLURM_SPANK_OPTION_fanstore_fanstore").has_value();
  s.enabled =
      used || Exists(RunDir(s.config, id.value())) || Exists(LocalDir(s.config, id.value()));
  if (!s.enabled) return 0;
  Credentials creds;
  creds.uid = id->uid;
  if (spank_get_item(sp, S_JOB_GID, &creds.gid) != ESPANK_SUCCESS) {
    LogError(phase, "cannot get the job's gid");
    return -1;
  }
  creds.groups = {creds.gid};
  const Config config = s.config;
  const JobIdentity who = id.value();
  const std::string local = LocalDir(config, who);
  auto rc = RunAsUser(creds, kCleanupTimeoutMs, [&] { return CleanNode(config, who, phase); });
  // As root, once the job's processes are gone: the job's own tmpfs goes in one call.
  bool dropped = false;
  Status drop = DropJobFs(local, creds.uid, &dropped);
  if (!drop.ok()) LogError(phase, drop.message());
  if (dropped) LogVerbose(phase, "unmounted the job's tmpfs at " + local);
  if (std::string(phase) == "prolog" && used) {
    // As root: the job's directories on this node, whatever another user planted under their
    // names first (moved aside, never deleted). A failure here fails the job, not the node:
    // the agent then reports what it cannot create.
    for (const std::string& dir : {LaunchDir(config, who), RunDir(config, who), local}) {
      std::string moved;
      Status claimed = ClaimDir(dir, creds.uid, creds.gid, &moved);
      if (!claimed.ok()) LogError(phase, claimed.message());
      if (!moved.empty())
        LogError(phase,
                 "moved aside " + moved + ", planted in the way of job " + std::to_string(who.job));
    }
    // A failed mount leaves the plain directory: the agent then removes its files itself.
    bool mounted = false;
    Status mount = config.job_fs ? MountJobFs(local, creds.uid, creds.gid, &mounted) : Status::OK();
    if (!mount.ok()) LogError(phase, mount.message() + " (the job uses the directory instead)");
    if (mounted)
      LogVerbose(phase, "mounted a tmpfs for job " + std::to_string(who.job) + " at " + local);
  }
  if (!rc.ok() || rc.value() != 0) {
    LogError(phase, "job " + std::to_string(who.job) + " could not be cleaned up completely on " +
                        who.node + (rc.ok() ? "" : ": " + rc.status().message()));
    return -1;
  }
  LogVerbose(phase, "job " + std::to_string(who.job) + " left nothing on " + who.node);
  return 0;
}

}  // namespace

int JobProlog(spank_t sp, int ac, char** av) { return Clean(sp, ac, av, "prolog"); }
int JobEpilog(spank_t sp, int ac, char** av) { return Clean(sp, ac, av, "epilog"); }

}  // namespace fanstore::spank
