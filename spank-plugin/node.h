// What the plugin learns from the node and the process it runs in, outside Slurm's API: this
// process's environment, the node's Slurm name and a user's name. `fanstore doctor` uses the same
// functions, so that it expands local_dir= as the plugin does.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace fanstore::spank {

// A variable of this process's environment, or nullopt.
std::optional<std::string> ProcessGetenv(const char* name);
// This process's whole environment, as KEY=VALUE entries.
std::vector<std::string> ProcessEnvironment();

// This node's name for %n and the run directory: SLURMD_NODENAME in this process's environment
// (slurmd's, inherited by slurmstepd and the prolog/epilog), else the host name up to its first
// '.'. Slurm's node name need not be the host name (NodeName= with NodeHostname=, or several
// nodes on one host in a test cluster). Fails when the name is not usable in a path
// (IsSafeNodeName).
[[nodiscard]] Result<std::string> NodeName();

// The user name of uid.
[[nodiscard]] Result<std::string> UserName(uid_t uid);

}  // namespace fanstore::spank
