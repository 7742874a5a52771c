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
// the user can make it remove only what the user could remove anyway. The work is in cleanup.cc;
// it fails the hook, which drains the node, only when the node itself is at fault.
//
// Our option arrives here only as SPANK__SLURM_SPANK_OPTION_fanstore_fanstore in the environment;
// the options are not registered in this context (spank_option_getopt would then fail).
#include <sys/stat.h>

#include "spank-plugin/cleanup.h"
#include "spank-plugin/hooks.h"
#include "spank-plugin/plugin_state.h"

namespace fanstore::spank {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

int Clean(spank_t sp, int ac, char** av, const char* phase) {
  if (LoadConfig(ac, av, phase) != 0) return -1;
  PluginState& s = State();
  auto id = GetJobIdentity(sp);
  if (!id.ok()) {
    LogError(phase, id.status().message());
    return -1;
  }
  CleanupRequest req;
  req.dataset = ProcessGetenv(kJobScriptDatasetEnv).has_value();
  req.output = ProcessGetenv(kJobScriptOutputEnv).has_value();
  s.enabled = req.dataset || req.output || Exists(RunDir(s.config, id.value())) ||
              Exists(LocalDir(s.config, id.value())) || Exists(OutputDir(s.config, id.value()));
  if (!s.enabled) return 0;
  req.creds.uid = id->uid;
  if (spank_get_item(sp, S_JOB_GID, &req.creds.gid) != ESPANK_SUCCESS) {
    LogError(phase, "cannot get the job's gid");
    return -1;
  }
  req.creds.groups = {req.creds.gid};
  req.config = s.config;
  req.id = id.value();
  req.prolog = std::string(phase) == "prolog";
  const CleanupLog log = {[phase](const std::string& m) { LogError(phase, m); },
                          [phase](const std::string& m) { LogInfo(phase, m); },
                          [phase](const std::string& m) { LogVerbose(phase, m); }};
  Status st = CleanJobOnNode(req, log);
  if (!st.ok()) {
    LogError(phase, st.message());
    return -1;
  }
  return 0;
}

}  // namespace

int JobProlog(spank_t sp, int ac, char** av) { return Clean(sp, ac, av, "prolog"); }
int JobEpilog(spank_t sp, int ac, char** av) { return Clean(sp, ac, av, "epilog"); }

}  // namespace fanstore::spank
