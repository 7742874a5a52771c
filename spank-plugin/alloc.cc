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
  s.enabled = !s.options.dataset.empty();
  if (!s.enabled) return 0;
  Status st = CheckUserOptions(s.options);
  if (st.ok()) st = CheckDataset(s.options.dataset);
  if (!st.ok()) {
    LogError("submit", st.message());
    return -1;
  }
  LogDebug("submit", "dataset " + s.options.dataset + " is valid");
  return 0;
}

}  // namespace fanstore::spank
