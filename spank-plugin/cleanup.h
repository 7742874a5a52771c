// The prolog's and the epilog's work on a node, as root (spank-plugin/job_script.cc only asks
// Slurm who and where): end a job's leftover agents and remove what the job left (run directory,
// local directory, launch files), drop the job's tmpfs, and in the prolog claim the job's
// directories and mount its tmpfs.
//
// A failing prolog or epilog drains the node. So this fails only for what the node itself cannot
// recover from (no process can be started to clean up); whatever a user left (a process that
// will not die, a directory refilled as it is emptied, a mount inside it, more files than the
// time allows) is logged by name, and the node goes on.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "spank-plugin/config.h"
#include "spank-plugin/job.h"
#include "spank-plugin/proc.h"

namespace fanstore::spank {

// Where the messages go: slurmd's log in the plugin, a list in the tests.
struct CleanupLog {
  std::function<void(const std::string&)> error, info, verbose;
};

struct CleanupRequest {
  Config config;
  JobIdentity id;
  Credentials creds;            // the job user: the removal runs as them
  bool prolog = false;          // the prolog: then claim the job's directories
  bool dataset = false;         // the job asked for a dataset (--fanstore)
  bool output = false;          // the job asked for an output directory (--fanstore-output)
  int user_timeout_ms = 60000;  // the removal as the user is stopped after this
  int agent_grace_ms = 3000;    // SIGTERM to SIGKILL
  int agent_kill_ms = 10000;    // SIGKILL to "still alive"
};

// Does the work above. Not OK only when nothing could be done (the node's own failure).
[[nodiscard]] Status CleanJobOnNode(const CleanupRequest& req, const CleanupLog& log);

}  // namespace fanstore::spank
