// Pure functions of the job lifecycle: names of the per-job paths, the agent step's command line
// and environment, and the agent's status file. No system calls, so every rule is unit-tested.
//
// Paths of job J of user U (uid N) on node H:
//   run directory   <run_dir>/fanstore.N.J.H       created by the agent, mode 0700: agent.sock,
//   table,
//                                                   status.json. Per node, because in a test
//                                                   cluster several nodes share one /dev/shm.
//   local directory <local_dir with %n,%j,%u>/fanstore.N.J   created by the agent: the staged
//   shards launch log      <run_dir>/fanstore.N/J.launch.log         output of the srun that runs
//   the agents launch lock     <run_dir>/fanstore.N/J.launch             (srun/salloc only) pid of
//   the supervisor
// On compute nodes the prolog (root) creates the run, local and launch directories and gives them
// to the user (spank-plugin/dirs.h), so nothing another user planted under these names is used.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "spank-plugin/config.h"

namespace fanstore::spank {

// The plugin's environment variables live with all the others in common/env.h.
inline constexpr const char* kEnvAgentStep = env::kAgentStep;
inline constexpr const char* kEnvJobAgents = env::kJobAgents;
inline constexpr const char* kEnvAgentLocalDir = env::kAgentLocalDir;
inline constexpr const char* kEnvAgentRunDir = env::kAgentRunDir;
// Prefix of the variables through which Slurm passes our options to later steps and to the epilog
// (SLURM_SPANK__SLURM_SPANK_OPTION_fanstore_<opt> in jobs, SPANK__... in the prolog and epilog).
inline constexpr char kOptionEnvMarker[] = "_SLURM_SPANK_OPTION_fanstore_";
// --fanstore as the prolog and the epilog see it.
inline constexpr char kJobScriptDatasetEnv[] = "SPANK__SLURM_SPANK_OPTION_fanstore_fanstore";
inline constexpr char kJobScriptOutputEnv[] = "SPANK__SLURM_SPANK_OPTION_fanstore_fanstore_output";
inline constexpr char kAgentStepName[] = "fanstore-agent";

// What the user asked for, from the --fanstore* options.
struct UserOptions {
  std::string dataset;        // empty: no dataset (FanStore is not used unless `output` is given)
  std::string mount;          // empty: <mount_prefix>/<NAME>
  std::string replicas;       // empty: the plugstack default (replicas=, itself 1 by default)
  std::string stats;          // empty: kDefaultStatsFile; "none": no file
  std::string output;         // --fanstore-output: the directory drained to; empty: none
  std::string drain_timeout;  // empty: the plugstack's drain_timeout=
  std::string unpack;         // --fanstore-unpack: auto, eager or lazy; empty: the agent's (auto)
  // The job uses FanStore: a dataset, an output directory, or both.
  bool used() const { return !dataset.empty() || !output.empty(); }
  // Some --fanstore* option was given (one that means nothing alone is refused).
  bool any() const {
    return used() || !mount.empty() || !replicas.empty() || !stats.empty() ||
           !drain_timeout.empty() || !unpack.empty();
  }
};

// Where the agents append their final counters at job end, relative to the submit directory.
inline constexpr char kDefaultStatsFile[] = "fanstore-%j.stats";

// Who and where: filled from Slurm in the remote, local and job-script contexts.
struct JobIdentity {
  uint32_t job = 0;
  uid_t uid = 0;
  std::string user;  // for %u
  std::string node;  // Slurm node name (SLURMD_NODENAME), for %n and the run directory
};

// Checks the option values that need no file system: dataset, mount and output are clean
// absolute paths, replicas is valid, the drain timeout is within the site's bound. Errors name
// the option.
[[nodiscard]] Status CheckUserOptions(const UserOptions& opts, const Config& config);
// Seconds the job's end waits for its output: the user's --fanstore-drain-timeout, at most the
// site's drain_timeout=, which is also the default.
[[nodiscard]] Result<int> ResolveDrainTimeout(const UserOptions& opts, const Config& config);

// NAME of a dataset directory: its basename without the ".fs" suffix.
[[nodiscard]] Result<std::string> DatasetName(const std::string& dataset);
// The virtual path: --fanstore-mount, or <mount_prefix>/<NAME>.
[[nodiscard]] Result<std::string> ResolveMount(const UserOptions& opts, const Config& config);
// The replicas argument for the agent: the user's, else the admin's (replicas=, default 1). "" only
// when both are empty (the agent's own default, all nodes), which DefaultConfig never gives.
std::string ResolveReplicas(const UserOptions& opts, const Config& config);

// Expands %n, %j, %u and %% in a local_dir template.
std::string ExpandTemplate(const std::string& tmpl, const JobIdentity& id);
// The part of a local_dir template that exists before any job: the components before the first
// one holding %j (the job's own part, which the prolog makes), or the whole template when none
// does. "/l/%u/%j/x" gives "/l/%u", "/%j" gives "/". `fanstore doctor` checks that part.
std::string TemplateBeforeJob(const std::string& tmpl);
// A node name usable in a path: non-empty, no '/', not "." or "..".
bool IsSafeNodeName(const std::string& node);

std::string RunDir(const Config& config, const JobIdentity& id);
std::string LocalDir(const Config& config, const JobIdentity& id);
// The job's output directory on this node, $FANSTORE_OUTPUT: beside the local directory (never
// in its tmpfs, which the epilog drops whole), LocalDir + ".output".
std::string OutputDir(const Config& config, const JobIdentity& id);
// The directories the prolog claims for a job: launch and run directories, and the local and
// output directories when it has a dataset and an output directory.
std::vector<std::string> JobDirs(const Config& config, const JobIdentity& id, bool dataset,
                                 bool output);
// The user's private directory of launch files (0700): claimed by root on compute nodes, made
// by the user where srun runs; a planted file under a predictable name is never used (F12).
std::string LaunchDir(const Config& config, const JobIdentity& id);
std::string LaunchLog(const Config& config, const JobIdentity& id);
std::string LaunchLock(const Config& config, const JobIdentity& id);

// The helper command that starts one agent per node as a job step with a real PMIx server:
//   srun --jobid=J --overlap -N NODES -n NODES --ntasks-per-node=1 ... --mpi=pmix
//        /bin/sh -c 'exec "$0" "$@" --local-dir "$FANSTORE_AGENT_LOCAL_DIR" --run-dir ...' AGENT
//        ...
// The per-node directories are filled in on each node from variables that the plugin sets in the
// agent step (the same code computes them for the epilog).
struct AgentStep {
  std::string srun, agent, dataset, mount, replicas;  // dataset and mount empty: output only
  std::string output;                                 // the agents' --output; empty: none
  int drain_timeout = 0;                              // the agents' --drain-timeout, with `output`
  std::string stats_out;                              // the agents' --stats-out; empty: none
  std::string cache_size;  // the agents' --cache-size; empty: the agent's default
  std::string unpack;      // the agents' --unpack; empty: the agent's default (auto)
  bool job_fs = false;     // --epilog-unmounts-local-dir: the prolog may mount a tmpfs there
  uint32_t job = 0;
  uint32_t nodes = 0;
};
std::vector<std::string> AgentStepArgv(const AgentStep& step);
// The agent step of `job` on `nodes` nodes for the user's options under the admin's config.
// submit_dir (SLURM_SUBMIT_DIR) anchors a relative --fanstore-stats.
[[nodiscard]] Result<AgentStep> MakeAgentStep(const Config& config, const UserOptions& opts,
                                              uint32_t job, uint32_t nodes,
                                              const std::string& submit_dir);
// The stats file for the agents: --fanstore-stats (or the default) with %j expanded, made absolute
// against submit_dir; "" for none, or when a relative path has no submit directory to go with.
std::string ResolveStatsFile(const UserOptions& opts, uint32_t job, const std::string& submit_dir);

// The agents' report on the job's output (their lines that say "output:" after the agent's tag)
// in the agent step's launch log, without srun's label: the last max_lines, each cut to 400
// bytes, control characters replaced (the log is the user's file; these lines go to slurmd's log).
std::vector<std::string> OutputReportLines(const std::string& log, size_t max_lines);

// The PMIx fence algorithm of the agents' exchange (SLURM_PMIX_FENCE of the agent step, whatever
// the job's or the site's mpi.conf says): chosen from the scale-out runs (docs/benchmarks.md, N2).
// Slurm builds no tree for a step of fewer nodes than TreeWidth, so there "tree" completes each
// node's fence with its own node's data alone (PMIx_Get: NOT-FOUND after it), and "mixed",
// Slurm's default, runs that tree for every fence without data. The ring is right at every N.
inline constexpr const char* kAgentPmixFence = "ring";
// The store of the agent step's PMIx servers (PMIX_MCA_gds, which Slurm's step daemon takes from
// the step's environment): the default one (ds21) fails on a value above about 4 MB, and the
// first round's indexes are tens of MB at ImageNet's size; the step daemon then crashes and the
// step hangs.
inline constexpr const char* kAgentPmixGds = "hash";

// The agent step's environment, from the launching environment: without our LD_PRELOAD entry, the
// FANSTORE_* variables of user tasks and our SPANK options (so that the step does not recurse), and
// with FANSTORE_AGENT_STEP=1, FANSTORE_DISABLE=1, SLURM_PMIX_FENCE=kAgentPmixFence (or the
// job's FANSTORE_PMIX_FENCE, when it names one) and PMIX_MCA_gds=kAgentPmixGds.
std::vector<std::string> AgentStepEnv(const std::vector<std::string>& env,
                                      const std::string& preload);

// LD_PRELOAD values: `preload` first, once; or `preload` removed. Entries are separated by ':' or '
// '.
std::string PrependPreload(const std::string& current, const std::string& preload);
std::string RemovePreload(const std::string& current, const std::string& preload);

}  // namespace fanstore::spank
