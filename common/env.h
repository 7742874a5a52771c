// Every environment variable FanStore reads or sets, in one place (after GekkoFS env.hpp).
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

// Set by the SPANK plugin.
inline constexpr char kAgentStep[] = "FANSTORE_AGENT_STEP";  // "1" in the agent step
inline constexpr char kJobAgents[] = "FANSTORE_JOB_AGENTS";  // job whose agents the batch step runs
inline constexpr char kAgentLocalDir[] = "FANSTORE_AGENT_LOCAL_DIR";  // per node, in the agent step
inline constexpr char kAgentRunDir[] = "FANSTORE_AGENT_RUN_DIR";      // per node, in the agent step
// In each task: "on" when the dataset is also mounted at FANSTORE_MOUNT for the kernel (FUSE),
// else "off: <why>".
inline constexpr char kKernelView[] = "FANSTORE_KERNEL_VIEW";

}  // namespace fanstore::env
