// The prolog's and the epilog's work on a node (see cleanup.h).
#include "spank-plugin/cleanup.h"

#include "image/mount_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include "common/env.h"
#include "common/private_dir.h"
#include "output/drainer.h"
#include "spank-plugin/dirs.h"

namespace fanstore::spank {
namespace {

// Exit statuses of the cleanup child.
constexpr int kClean = 0, kLeft = 1;

// The job's agents on this node, found by their environment, which Slurm and the plugin set and
// no pid reuse can fake: the agent step's marker, this job, this node (nodes may share one /proc
// in a test cluster). A user can fake it with a process of their own: that one is ended too.
void EndAgents(const CleanupRequest& req, const CleanupLog& log, int* rc) {
  const std::vector<std::string> marks = {
      std::string(kEnvAgentStep) + "=1",
      std::string(env::kSlurmJobId) + "=" + std::to_string(req.id.job),
      std::string(env::kSlurmdNodeName) + "=" + req.id.node};
  const std::vector<pid_t> pids = FindProcesses(req.id.uid, marks);
  if (pids.empty()) return;
  std::string list;
  for (pid_t p : pids) list += " " + std::to_string(p);
  log.info("ending leftover agent processes of job " + std::to_string(req.id.job) + ":" + list);
  for (pid_t p : TerminateProcesses(pids, req.agent_grace_ms, req.agent_kill_ms)) {
    log.error("process " + std::to_string(p) + " of job " + std::to_string(req.id.job) +
              " is still there " + std::to_string(req.agent_kill_ms / 1000) +
              " s after SIGKILL: left to the kernel");
    *rc = kLeft;
  }
}

// As the job user: the job's output directory goes when it is empty; what is in it did not
// drain (the agents named it), and stays for the user to copy by hand.
void KeepUndrained(const CleanupRequest& req, const CleanupLog& log) {
  const std::string dir = OutputDir(req.config, req.id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != req.id.uid) return;
  if (::rmdir(dir.c_str()) == 0) return;
  log.error("kept " + dir + ": output of job " + std::to_string(req.id.job) +
            " that did not drain (named in the job's output and in " + output::kManifestName +
            " in its --fanstore-output directory); the user copies it by hand");
}

// As the job user: what the job left in its directories.
int RemoveLeftovers(const CleanupRequest& req, const CleanupLog& log) {
  int rc = kClean;
  EndAgents(req, log, &rc);
  for (const std::string& path : {RunDir(req.config, req.id), LocalDir(req.config, req.id)}) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (IsMountPoint(path)) continue;  // the job's own tmpfs: root unmounts it whole after this
    if (st.st_uid != req.id.uid) {  // planted by someone else: not ours to remove, in no one's way
      log.info(path + " belongs to uid " + std::to_string(st.st_uid) +
               ", not to the job's user: left alone");
      continue;
    }
    // Empty, as the agents leave the directories the prolog claimed (and the job's tmpfs
    // leaves its mount point): nothing to report.
    if (::rmdir(path.c_str()) == 0) continue;
    Status s = RemoveTree(path);
    if (s.ok()) {
      log.info("removed " + path + " (left by an agent that did not clean up)");
    } else {
      log.error("left " + path + ": " + s.message());
      rc = kLeft;
    }
  }
  KeepUndrained(req, log);
  // The launch files of the batch step (or of a supervisor that died); a live supervisor removes
  // its own.
  const std::string lock = LaunchLock(req.config, req.id);
  const pid_t supervisor = ReadPidFile(lock);
  if (supervisor <= 0 || !ProcessAlive(supervisor)) {
    ::unlink(LaunchLog(req.config, req.id).c_str());
    ::unlink(lock.c_str());
    ::rmdir(LaunchDir(req.config, req.id).c_str());  // when no other job of the user's uses it
  }
  return rc;
}

// ClaimDir, and with local_dir=/tmp/%u a directory of the user's name that another user made
// first in a place of root's: moved aside too, as anything planted, and the user's own put in
// its place, so that nobody can make a user's jobs fail on a node by planting it (their
// directory would otherwise be refused: its owner could swap what is below it).
Status ClaimWithUserDir(const std::string& dir, const CleanupRequest& req, std::string* moved) {
  Status st = ClaimDir(dir, req.creds.uid, req.creds.gid, moved);
  const std::string parent = dir.substr(0, dir.rfind('/'));
  if (st.ok() || st.code() != Status::Code::kPermission || req.id.user.empty() ||
      parent.substr(parent.rfind('/') + 1) != req.id.user)
    return st;
  std::string aside;
  if (!ClaimDir(parent, req.creds.uid, req.creds.gid, &aside).ok()) return st;
  FS_RETURN_IF_ERROR(ClaimDir(dir, req.creds.uid, req.creds.gid, moved));
  if (!aside.empty()) *moved = aside;
  return Status::OK();
}

// As root, in the prolog: the job's directories on this node, whatever another user planted
// under their names first (moved aside, never deleted), and the job's tmpfs. A failure here
// fails the job, not the node: the agent then reports what it cannot create, and a failed mount
// leaves the plain directory, whose files the agent removes itself.
void Prepare(const CleanupRequest& req, const CleanupLog& log) {
  const uint32_t job = req.id.job;
  const std::string local = LocalDir(req.config, req.id);
  for (const std::string& dir : JobDirs(req.config, req.id, req.dataset, req.output)) {
    std::string moved;
    Status claimed = ClaimWithUserDir(dir, req, &moved);
    if (!claimed.ok()) log.error(claimed.message());
    if (!moved.empty())
      log.error("moved aside " + moved + ", planted in the way of job " + std::to_string(job));
  }
  bool mounted = false;
  Status mount = req.config.job_fs && req.dataset
                     ? MountJobFs(local, req.creds.uid, req.creds.gid, &mounted)
                     : Status::OK();
  if (!mount.ok()) log.error(mount.message() + " (the job uses the directory instead)");
  if (mounted) log.verbose("mounted a tmpfs for job " + std::to_string(job) + " at " + local);
}

}  // namespace

Status CleanJobOnNode(const CleanupRequest& req, const CleanupLog& log) {
  const std::string job = std::to_string(req.id.job), local = LocalDir(req.config, req.id);
  // A fork that fails for lack of processes or memory (a fork bomb in another job) is tried
  // again for a few seconds before the node is said to be at fault.
  // An agent's image still mounted (its mount service was killed): detached first, as root, so
  // that the removal below reaches the files under it.
  bool detached = false;
  if (Status st = image::DetachImage(local, req.creds.uid, &detached); !st.ok())
    log.error(st.message());
  if (detached) log.verbose("detached the agent's image at " + local + "/data");
  Result<int> rc = Status::IOError("not started");
  for (int attempt = 0; attempt < 5; attempt++) {
    if (attempt > 0) ::sleep(1);
    rc = RunAsUser(req.creds, req.user_timeout_ms, [&] { return RemoveLeftovers(req, log); });
    if (rc.ok()) break;
  }
  if (!rc.ok()) return rc.status().Prefixed("cannot start the cleanup of job " + job);
  if (rc.value() < 0)
    log.error("the cleanup of job " + job + " as its user ended before it was done (killed, or " +
              "stopped after " + std::to_string(req.user_timeout_ms / 1000) +
              " s): what it did not reach is left");
  // As root, once the job's processes are gone: the job's own tmpfs goes in one call.
  bool dropped = false;
  Status drop = DropJobFs(local, req.creds.uid, &dropped);
  if (!drop.ok()) log.error(drop.message());
  if (dropped) log.verbose("unmounted the job's tmpfs at " + local);
  if (req.prolog && (req.dataset || req.output)) Prepare(req, log);
  if (rc.value() != kClean)
    log.error("job " + job + " could not be cleaned up completely on " + req.id.node +
              " (the node goes on; what is left is named above)");
  else
    log.verbose("job " + job + " left nothing on " + req.id.node);
  return Status::OK();
}

}  // namespace fanstore::spank
