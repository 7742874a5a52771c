// Local context (srun, as the user).
//
// Who starts the agents: the first process that lives as long as the allocation.
//  - sbatch: the batch step (slurmstepd.cc). It exports FANSTORE_JOB_AGENTS=<job id> to the batch
//    script, so the sruns inside it start nothing.
//  - `srun --fanstore=...` from a login shell, and the sruns inside `salloc --fanstore=...`: here,
//  in
//    local_user_init, after Slurm created the allocation and the step. The agent step's srun runs
//    under a small supervisor outside the user's srun, so that it survives that srun inside salloc;
//    a lock file holding the supervisor's pid makes later sruns of the same job start nothing.
// Each step then waits on every node, in user_init, for that node's agent (slurmstepd.cc).
#include <unistd.h>

#include "common/env.h"
#include "spank-plugin/dataset_check.h"
#include "spank-plugin/dirs.h"
#include "spank-plugin/hooks.h"
#include "spank-plugin/options.h"
#include "spank-plugin/plugin_state.h"

namespace fanstore::spank {
namespace {

constexpr char kPhase[] = "srun";

// True inside a batch job whose batch step already started the agents.
bool AgentsRunByBatchStep() {
  auto owner = ProcessGetenv(kEnvJobAgents);
  auto job = ProcessGetenv(env::kSlurmJobId);
  return owner && job && *owner == *job;
}

}  // namespace

int SrunInit(spank_t sp, int ac, char** av) {
  if (LoadConfig(ac, av, kPhase) != 0) return -1;
  return RegisterOptions(sp, kPhase);
}

int SrunPostOpt(spank_t /*sp*/, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  // The agent step's own srun must not start agents again.
  const bool agent_step = ProcessGetenv(kEnvAgentStep).value_or("") == "1";
  s.enabled = s.options.used() && !agent_step;
  if (!s.options.any() || agent_step) return 0;
  if (AgentsRunByBatchStep()) return 0;  // checked at submission already
  Status st = CheckUserOptions(s.options, s.config);
  if (st.ok()) st = CheckUserPaths(s.options);
  if (!st.ok()) {
    LogError(kPhase, st.message());
    return -1;
  }
  return 0;
}

int SrunLocalUserInit(spank_t sp, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  if (!s.enabled) return 0;
  if (AgentsRunByBatchStep()) return 0;

  JobIdentity id;
  spank_err_t rc = spank_get_item(sp, S_JOB_ID, &id.job);
  if (rc != ESPANK_SUCCESS) {
    LogError(kPhase, std::string("cannot get the job id: ") + spank_strerror(rc));
    return -1;
  }
  id.uid = ::getuid();
  auto count = ParseNodeCount(ProcessGetenv(env::kSlurmJobNumNodes));
  if (!count.ok()) {
    LogError(kPhase, count.status().message());
    return -1;
  }
  uint32_t nodes = count.value();
  if (nodes == 0 && spank_get_item(sp, S_JOB_NNODES, &nodes) != ESPANK_SUCCESS) nodes = 0;
  auto step = MakeAgentStep(s.config, s.options, id.job, nodes,
                            ProcessGetenv(env::kSlurmSubmitDir).value_or(""));
  if (!step.ok()) {
    LogError(kPhase, step.status().message());
    return -1;
  }
  // Where srun runs (a login node) no prolog claims the launch directory: when something is
  // planted under its name, the user's runtime or home directory serves instead. Every srun of
  // the allocation goes down the same list, so they all find the same lock.
  std::string dir;
  std::string why;
  for (const std::string& d :
       {LaunchDir(s.config, id), ProcessGetenv(env::kXdgRuntimeDir).value_or("") + "/fanstore",
        ProcessGetenv(env::kHome).value_or("") + "/.fanstore"}) {
    if (d[0] != '/') continue;
    Status ok = EnsureOwnDir(d);
    if (ok.ok()) {
      dir = d;
      break;
    }
    why += (why.empty() ? "" : "; ") + ok.message();
  }
  if (dir.empty()) {
    LogError(kPhase, "cannot keep the launch files: " + why);
    return -1;
  }
  if (dir != LaunchDir(s.config, id)) LogInfo(kPhase, "launch files in " + dir + " (" + why + ")");
  const std::string lock = dir + "/" + std::to_string(id.job) + ".launch", log = lock + ".log";
  auto started = SpawnSupervised(AgentStepArgv(step.value()),
                                 AgentStepEnv(ProcessEnvironment(), s.config.preload), lock, log);
  if (!started.ok()) {
    LogError(kPhase, "cannot start the FanStore agents: " + started.status().message());
    return -1;
  }
  if (started.value())
    LogVerbose(kPhase, "started the FanStore agents of job " + std::to_string(id.job) + " on " +
                           std::to_string(nodes) + " node(s); their output is in " + log);
  else
    LogDebug(kPhase,
             "the FanStore agents of job " + std::to_string(id.job) + " are already running");
  return 0;
}

}  // namespace fanstore::spank
