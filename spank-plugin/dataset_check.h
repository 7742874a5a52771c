// The submission-time check of --fanstore=PATH, run as the submitting user (sbatch, salloc, srun),
// so that a bad dataset is refused before the job waits in the queue.
#pragma once

#include <string>

#include "common/status.h"

namespace fanstore::spank {

// OK when `dataset` is an absolute path to a FanStore dataset of a supported version whose manifest
// and shards the calling user can read. Otherwise a message that names the path and the problem:
// missing, not a FanStore dataset, unreadable, wrong version, missing or unreadable shard.
[[nodiscard]] Status CheckDataset(const std::string& dataset);

}  // namespace fanstore::spank
