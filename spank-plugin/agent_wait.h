// Waiting, in a step's slurm_spank_user_init, until this node's agent is ready.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spank-plugin/proc.h"

namespace fanstore::spank {

struct WaitRequest {
  std::string run_dir;  // the agent's run directory on this node
  std::string node;     // for messages
  uid_t uid = 0;        // the run directory must belong to this user and be private
  uint32_t job = 0;
  int timeout_s = 600;
  pid_t helper = -1;       // the agent step's srun, when this process started it (batch step)
  std::string launch_log;  // its output, quoted when it ends early
  std::string squeue;      // to notice a cancelled job or a vanished agent step
  std::vector<std::string> squeue_env;
  const Credentials* creds = nullptr;  // squeue runs as the job user
};

// Returns OK once status.json says "ready". Fails, naming the node, when the agent reports "failed"
// (with its message), when its run directory disappears after it appeared (the agent ended:
// typically the job was cancelled), when the helper srun ends first, when squeue shows the job or
// the agent step gone, or after timeout_s. A run directory that is not a private directory of the
// job user is refused: another user could have planted it. *waited_s is the time spent.
//
// slurmstepd does not act on a cancellation while user_init runs, so this function must notice it
// itself: otherwise a cancelled job would sit in COMPLETING until the timeout and could even start
// its batch script afterwards.
[[nodiscard]] Status WaitForAgent(const WaitRequest& req, double* waited_s);

}  // namespace fanstore::spank
