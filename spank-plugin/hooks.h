// The plugin's hooks, one small file per SPANK context (after NVIDIA/pyxis); plugin.cc dispatches
// on spank_context(). Each returns 0 or -1 (after logging) and never throws.
#pragma once

#include "spank-plugin/spank_api.h"

namespace fanstore::spank {

// Allocator context: sbatch and salloc, as the user (alloc.cc).
int AllocInit(spank_t sp, int ac, char** av);
int AllocPostOpt(spank_t sp, int ac, char** av);

// Local context: srun, as the user (srun.cc).
int SrunInit(spank_t sp, int ac, char** av);
int SrunPostOpt(spank_t sp, int ac, char** av);
int SrunLocalUserInit(spank_t sp, int ac, char** av);

// Remote context: slurmstepd of the batch step and of every srun step (slurmstepd.cc).
int StepdInit(spank_t sp, int ac, char** av);
int StepdPostOpt(spank_t sp, int ac, char** av);
int StepdUserInit(spank_t sp, int ac, char** av);
int StepdTaskInitPrivileged(spank_t sp, int ac, char** av);
int StepdTaskInit(spank_t sp, int ac, char** av);
int StepdTaskExit(spank_t sp, int ac, char** av);

// Job-script context: the prolog and epilog, as root on every node of the job (job_script.cc).
int JobProlog(spank_t sp, int ac, char** av);
int JobEpilog(spank_t sp, int ac, char** av);

}  // namespace fanstore::spank
