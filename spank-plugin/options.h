// What users and Slurm hand the plugin as text: the --fanstore* option values and the job's
// node count. Pure functions, so that the hooks (plugin_state.cc, srun.cc, slurmstepd.cc) keep
// only the Slurm calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "spank-plugin/job.h"

namespace fanstore::spank {

// The plugin's options; the values are the option ids registered with Slurm.
enum UserOption : int {
  kOptDataset = 0,
  kOptMount = 1,
  kOptReplicas = 2,
  kOptStats = 3,
  kOptOutput = 4,
  kOptDrainTimeout = 5,
  kOptUnpack = 6,
  kOptLast = kOptUnpack
};
// "fanstore", "fanstore-mount", ...
const char* OptionName(UserOption which);

// Records --<option>=value in opts; paths lose trailing slashes. Slurm may call an option
// callback more than once with the same value; an empty or a different value is an error.
Status SetUserOption(UserOptions* opts, UserOption which, const std::string& value);

// The most nodes a job may have here: far above any machine, far below overflow.
inline constexpr int64_t kMaxNodes = 1 << 20;
// SLURM_JOB_NUM_NODES: 0 when unset (the caller asks Slurm otherwise), the count when it is a
// number in [1, kMaxNodes], an error naming the value otherwise.
Result<uint32_t> ParseNodeCount(const std::optional<std::string>& value);

}  // namespace fanstore::spank
