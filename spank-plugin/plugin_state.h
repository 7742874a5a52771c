// What the plugin's hooks share within one process (sbatch, srun, slurmstepd or the prolog/epilog),
// and the helpers every context uses: plugstack config, user options, job identity, logging.
// Slurm calls the hooks of one process from one thread, so there is no locking.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "spank-plugin/config.h"
#include "spank-plugin/job.h"
#include "spank-plugin/node.h"
#include "spank-plugin/proc.h"
#include "spank-plugin/spank_api.h"

namespace fanstore::spank {

struct PluginState {
  bool config_loaded = false;
  Config config;
  UserOptions options;
  bool enabled = false;  // set in init_post_opt (or the job-script hook) once the options are known
  bool agent_step = false;     // remote context: this step runs the agents
  std::string deferred_error;  // from user_init, reported by task_init_privileged (Slurm bug 7573)
  std::string local_dir;       // this node's staged copy, made read-only for the tasks
  uint32_t uid = 0;            // the job user, who must own it
  uint32_t gid = 0;
  std::string mount;         // where the tasks see the dataset
  std::string socket;        // this node's agent
  std::string run_dir;       // its run directory
  std::string view_error;    // why the task has none
  int agent_srun = -1;       // batch step: a pidfd of the agent step's srun, stopped in task_exit
  pid_t agent_srun_pid = 0;  // its pid, to check that the descriptor is still that pidfd
  // Batch step with --fanstore-output: how long task_exit waits for the drain, the log in which
  // the agents report on it, and a socket pair over which the batch task hands its stderr to
  // slurmstepd, where task_exit writes that report (the job's output file).
  int drain_timeout_s = 0;
  std::string launch_log;
  int report_parent = -1, report_child = -1;
  uint32_t job = 0;   // for the report's lines
  Credentials creds;  // the job user, who reads the launch log and writes the report
};
PluginState& State();

// Parses the plugstack arguments once per process. On error logs "fanstore: <phase>: ..." and
// returns -1.
int LoadConfig(int ac, char** av, const char* phase);
// Registers the --fanstore* options. Not in the prolog/epilog: there
// spank_option_getopt would then fail (see SLURM-TESTBED.md).
int RegisterOptions(spank_t sp, const char* phase);

// Logs "fanstore: <phase>: <message>" at the given level.
void LogError(const char* phase, const std::string& msg);
void LogInfo(const char* phase, const std::string& msg);
void LogVerbose(const char* phase, const std::string& msg);
void LogDebug(const char* phase, const std::string& msg);

// A variable of the job's environment (remote context), or nullopt.
std::optional<std::string> JobGetenv(spank_t sp, const char* name);
// The job's whole environment (remote context).
std::vector<std::string> JobEnvironment(spank_t sp);
// This process's environment: ProcessGetenv, ProcessEnvironment (node.h).

// Job id, uid and user name from Slurm; node from this process's environment (NodeName, node.h).
// The job's own environment is no good for the node: steps inherit SLURMD_NODENAME of the batch
// node.
[[nodiscard]] Result<JobIdentity> GetJobIdentity(spank_t sp);
// The job user's uid, gid and supplementary groups.
[[nodiscard]] Result<Credentials> GetJobCredentials(spank_t sp);

}  // namespace fanstore::spank
