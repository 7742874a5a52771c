// Allocator context (sbatch, salloc; as the user): registers the options and refuses a bad dataset
// at submission, before the job waits in the queue.
#include "spank-plugin/dataset_check.h"
#include "spank-plugin/hooks.h"
#include "spank-plugin/plugin_state.h"

namespace fanstore::spank {

int AllocInit(spank_t sp, int ac, char** av) {
  if (LoadConfig(ac, av, "submit") != 0) return -1;
  return RegisterOptions(sp, "submit");
}

int AllocPostOpt(spank_t /*sp*/, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  s.enabled = s.options.used();
  if (!s.options.any()) return 0;
  Status st = CheckUserOptions(s.options, s.config);
  if (st.ok()) st = CheckUserPaths(s.options);
  if (!st.ok()) {
    LogError("submit", st.message());
    return -1;
  }
  LogDebug("submit", "the --fanstore options are valid");
  return 0;
}

}  // namespace fanstore::spank
