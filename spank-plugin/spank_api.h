// Slurm's SPANK header, made usable from C++. spank.h declares the slurm_spank_* hooks outside its
// own extern "C" block, which would give them C++ linkage here; wrapping the include fixes that.
#pragma once

extern "C" {
#include <slurm/slurm.h>  // SLURM_BATCH_SCRIPT, SLURM_EXTERN_CONT
#include <slurm/spank.h>
}
