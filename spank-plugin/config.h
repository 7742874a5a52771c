// The plugin's configuration: the `key=value` arguments of its plugstack.conf line.
//
//   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_fanstore.so local_dir=/local/%u
//   stagein_timeout=600
//
// ParseConfig is a pure function: it sees only its arguments, so it is unit-tested without Slurm.
#pragma once

#include <string>
#include <vector>

#include "common/path.h"
#include "common/status.h"

namespace fanstore::spank {

struct Config {
  std::string agent;    // agent= : the fanstore-agent executable
  std::string preload;  // preload= : libfanstore_preload.so, put in the tasks' LD_PRELOAD
  std::string srun;  // srun= : the srun that starts the agent step (squeue is looked up beside it)
  std::string local_dir;  // local_dir= : node-local directory template (%n node, %j job id, %u
                          // user, %% a '%')
  std::string run_dir;  // run_dir= : where the per-job, per-node run directory goes (shared memory)
  std::string
      mount_prefix;  // mount_prefix= : the mount is PREFIX/NAME unless --fanstore-mount is given
  int stagein_timeout =
      0;  // stagein_timeout= : seconds a step waits for its node's agent to be ready
  std::string
      replicas;  // replicas= : default for --fanstore-replicas (default "1": one copy per shard)
  // kernel_view= : yes (default) mounts the dataset for each task with FUSE too, at the same
  // path, for what the interception library cannot reach (static binaries, exec, dlopen)
  bool kernel_view = true;
  // local_fs= : auto (default) gives each job a tmpfs of its own at its local directory when
  // local_dir is on tmpfs (dirs.h MountJobFs); dir: always a plain directory
  bool job_fs = true;
  // image= : auto (default) lets the agent keep its share as an EROFS image on a disk local
  // directory, mounted by a small service of root's (image/mount_service.h); no: files
  bool image = true;
  std::string cache_size;  // cache_size= : the agents' --cache-size (default empty: half the free
                           // space left in the local directory after stage-in)
  // drain_timeout= : seconds the end of a job with --fanstore-output waits at most for its
  // output to drain (default 300); users may ask for less (--fanstore-drain-timeout)
  int drain_timeout = 300;
};

// The defaults, before any argument: the installed (or build-tree) paths baked in at configure
// time.
Config DefaultConfig();

// Parses plugstack arguments over DefaultConfig(). Every argument must be `key=value` with a known
// key, given at most once, and a valid value. On failure the Status names the offending argument
// and, for an unknown key, lists the known ones.
[[nodiscard]] Result<Config> ParseConfig(const std::vector<std::string>& args);

// The admin's local_dir and run_dir with the symlinks in their fixed part (up to the last '/'
// before any '%') resolved on this node, as root reads the admin's configuration: the job
// directories below them are then reached without following any symlink (issue 30). A part that
// does not resolve here (another node's path) is kept as it is.
void ResolveAdminSymlinks(Config* config);

// The longest drain_timeout= a site may set: a day.
inline constexpr int kMaxDrainTimeout = 24 * 3600;

// Value checks shared with the user options.
using fanstore::IsCleanAbsolutePath;             // common/path.h
bool IsValidReplicas(const std::string& value);  // "all" or an integer in [1, 65535]

}  // namespace fanstore::spank
