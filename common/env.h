// Every environment variable FanStore reads or sets, in one place (after GekkoFS env.hpp): its own,
// and those of Slurm, PMIx and the system that it looks at.
#pragma once

namespace fanstore::env {

// Set for user tasks by `fanstore run` and the SPANK plugin; read by the interceptor.
inline constexpr char kMount[] = "FANSTORE_MOUNT";    // virtual path, e.g. /fanstore/imagenet
inline constexpr char kTable[] = "FANSTORE_TABLE";    // path of the shared-memory metadata table
inline constexpr char kSocket[] = "FANSTORE_SOCKET";  // the local agent's Unix socket
inline constexpr char kLog[] = "FANSTORE_LOG";        // interceptor logging: unset = silent
// Milliseconds the interceptor waits for the agent to connect, take a request and answer an
// open (which may include a fetch from another node). 0: no limit. Default 120000.
inline constexpr char kOpenTimeoutMs[] = "FANSTORE_OPEN_TIMEOUT_MS";
// Set to 1 in the agent's own environment so that a preload library it inherits stays inert.
inline constexpr char kDisable[] = "FANSTORE_DISABLE";

// Read by the SPANK plugin in the job's environment: the PMIx fence algorithm of the agents'
// exchange (tree, ring or mixed; Slurm's SLURM_PMIX_FENCE for the agent step only). For
// measurements; the default is the plugin's kAgentPmixFence.
inline constexpr char kPmixFence[] = "FANSTORE_PMIX_FENCE";

// Read by the agent (the job's environment reaches the agent step): "pmix" sends a large
// exchange's indexes through PMIx (direct modex) even where the peer service could gather them.
// For measurements, side by side with the default.
inline constexpr char kExchangeVia[] = "FANSTORE_EXCHANGE";

// Set by the SPANK plugin.
inline constexpr char kAgentStep[] = "FANSTORE_AGENT_STEP";  // "1" in the agent step
inline constexpr char kJobAgents[] = "FANSTORE_JOB_AGENTS";  // job whose agents the batch step runs
inline constexpr char kAgentLocalDir[] = "FANSTORE_AGENT_LOCAL_DIR";  // per node, in the agent step
inline constexpr char kAgentRunDir[] = "FANSTORE_AGENT_RUN_DIR";      // per node, in the agent step
inline constexpr char kAgentOutputDir[] =
    "FANSTORE_AGENT_OUTPUT_DIR";  // per node, in the agent step
// In the agent step, when the plugin started a mount service for the agent's image
// (image/mount_service.h): the descriptor of its socket.
inline constexpr char kMountService[] = "FANSTORE_MOUNT_SERVICE_FD";
// In each task: "on" when the dataset is also mounted at FANSTORE_MOUNT for the kernel (FUSE),
// else "off: <why>".
inline constexpr char kKernelView[] = "FANSTORE_KERNEL_VIEW";
// In each task of a job with an output directory (--fanstore-output, `fanstore run --output`): the
// node-local directory whose files are drained to the parallel file system.
inline constexpr char kOutput[] = "FANSTORE_OUTPUT";

// Read by `fanstore run`: the agent and the interception library to use instead of those beside
// the fanstore binary or installed.
inline constexpr char kRunAgent[] = "FANSTORE_AGENT";
inline constexpr char kRunPreload[] = "FANSTORE_PRELOAD";
// Set by `fanstore stats --plot` for its plotting script: the script, and the PNG to write.
inline constexpr char kPlotScript[] = "FANSTORE_PLOT_SCRIPT";
inline constexpr char kPlotOut[] = "FANSTORE_PLOT_OUT";

// The agent.
// Set (to 1) by the agent once it has re-executed itself with its malloc tunables; set by the user
// (to anything, e.g. 0), it keeps glibc's defaults.
inline constexpr char kAgentMalloc[] = "FANSTORE_AGENT_MALLOC";
// Set: the agent runs as root in a Slurm job (which otherwise means a broken launch).
inline constexpr char kAllowRoot[] = "FANSTORE_ALLOW_ROOT";
// Tests only: hold the agent at a phase ("staging:MS" or "exchange:MS"), and hold its background
// unpacking back by MS milliseconds.
inline constexpr char kTestPause[] = "FANSTORE_TEST_PAUSE";
inline constexpr char kTestUnpackDelayMs[] = "FANSTORE_TEST_UNPACK_DELAY_MS";

// Slurm's, read.
inline constexpr char kSlurmJobId[] = "SLURM_JOB_ID";
inline constexpr char kSlurmJobNumNodes[] = "SLURM_JOB_NUM_NODES";
inline constexpr char kSlurmSubmitDir[] = "SLURM_SUBMIT_DIR";
inline constexpr char kSlurmLaunchNodeIpaddr[] = "SLURM_LAUNCH_NODE_IPADDR";
// slurmd's node name, inherited by slurmstepd, the prolog and the epilog. (A job's environment
// holds the batch node's.)
inline constexpr char kSlurmdNodeName[] = "SLURMD_NODENAME";
// SLURM_RLIMIT_NOFILE=1024, ...: the job's soft limits, one variable per resource.
inline constexpr char kSlurmRlimitPrefix[] = "SLURM_RLIMIT_";

// PMIx's: set in the tasks of a step with a PMIx server (read), and its store (set).
inline constexpr char kPmixRank[] = "PMIX_RANK";
inline constexpr char kPmixNamespace[] = "PMIX_NAMESPACE";
inline constexpr char kPmixMcaGds[] = "PMIX_MCA_gds";
// Slurm's mpi/pmix: the fence algorithm of a step (set in the agent step's environment).
inline constexpr char kSlurmPmixFence[] = "SLURM_PMIX_FENCE";

// The system's.
inline constexpr char kLdPreload[] = "LD_PRELOAD";          // read and set
inline constexpr char kGlibcTunables[] = "GLIBC_TUNABLES";  // read and set by the agent
inline constexpr char kTmpdir[] = "TMPDIR";                 // `fanstore run`'s default --local-dir
inline constexpr char kHome[] = "HOME";
inline constexpr char kXdgRuntimeDir[] = "XDG_RUNTIME_DIR";

}  // namespace fanstore::env
