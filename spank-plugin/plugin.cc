// spank_fanstore.so: the `--fanstore` option, the agents' lifecycle and LD_PRELOAD injection.
// This file only exports the SPANK symbols and dispatches on spank_context(); the work is in one
// file per context. No exception ever crosses into Slurm.
#include <exception>

#include "spank-plugin/hooks.h"
#include "spank-plugin/plugin_state.h"

// SPANK_PLUGIN(fanstore, 1) would give these internal linkage in C++ (namespace-scope const).
extern "C" {
extern const char plugin_name[] = "fanstore";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern const unsigned int spank_plugin_version = 1;
}

namespace {

using namespace fanstore::spank;

template <typename Fn>
int Guarded(const char* phase, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::exception& e) {
    slurm_error("fanstore: %s: internal error: %s", phase, e.what());
  } catch (...) {
    slurm_error("fanstore: %s: internal error", phase);
  }
  return -1;
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av) noexcept {
  return Guarded("init", [&] {
    switch (spank_context()) {
      case S_CTX_ALLOCATOR:
        return AllocInit(sp, ac, av);
      case S_CTX_LOCAL:
        return SrunInit(sp, ac, av);
      case S_CTX_REMOTE:
        return StepdInit(sp, ac, av);
      default:
        return 0;
    }
  });
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) noexcept {
  return Guarded("init_post_opt", [&] {
    switch (spank_context()) {
      case S_CTX_ALLOCATOR:
        return AllocPostOpt(sp, ac, av);
      case S_CTX_LOCAL:
        return SrunPostOpt(sp, ac, av);
      case S_CTX_REMOTE:
        return StepdPostOpt(sp, ac, av);
      default:
        return 0;
    }
  });
}

int slurm_spank_local_user_init(spank_t sp, int ac, char** av) noexcept {
  return Guarded("local_user_init", [&] {
    return spank_context() == S_CTX_LOCAL ? SrunLocalUserInit(sp, ac, av) : 0;
  });
}

int slurm_spank_user_init(spank_t sp, int ac, char** av) noexcept {
  return Guarded("user_init",
                 [&] { return spank_context() == S_CTX_REMOTE ? StepdUserInit(sp, ac, av) : 0; });
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char** av) noexcept {
  return Guarded("task_init_privileged", [&] {
    return spank_context() == S_CTX_REMOTE ? StepdTaskInitPrivileged(sp, ac, av) : 0;
  });
}

int slurm_spank_task_init(spank_t sp, int ac, char** av) noexcept {
  return Guarded("task_init",
                 [&] { return spank_context() == S_CTX_REMOTE ? StepdTaskInit(sp, ac, av) : 0; });
}

int slurm_spank_task_exit(spank_t sp, int ac, char** av) noexcept {
  return Guarded("task_exit",
                 [&] { return spank_context() == S_CTX_REMOTE ? StepdTaskExit(sp, ac, av) : 0; });
}

int slurm_spank_job_prolog(spank_t sp, int ac, char** av) noexcept {
  return Guarded("prolog",
                 [&] { return spank_context() == S_CTX_JOB_SCRIPT ? JobProlog(sp, ac, av) : 0; });
}

int slurm_spank_job_epilog(spank_t sp, int ac, char** av) noexcept {
  return Guarded("epilog",
                 [&] { return spank_context() == S_CTX_JOB_SCRIPT ? JobEpilog(sp, ac, av) : 0; });
}

}  // extern "C"
