// The submission-time check of --fanstore=PATH, run as the submitting user (sbatch, salloc, srun),
// so that a bad dataset is refused before the job waits in the queue.
#pragma once

#include <string>

#include "common/status.h"
#include "spank-plugin/job.h"

namespace fanstore::spank {

// OK when `dataset` is an absolute path to a FanStore dataset of a supported version whose manifest
// and shards the calling user can read. Otherwise a message that names the path and the problem:
// missing, not a FanStore dataset, unreadable, wrong version, missing or unreadable shard.
[[nodiscard]] Status CheckDataset(const std::string& dataset);

// OK when the calling user can write the output directory `output` (--fanstore-output): it is a
// directory they can write, or it is missing and its parent is one (the agents make it).
[[nodiscard]] Status CheckOutputTarget(const std::string& output);

// Both checks, for what `opts` asks: at submission (sbatch, salloc, srun).
[[nodiscard]] Status CheckUserPaths(const UserOptions& opts);

}  // namespace fanstore::spank
