// `fanstore run DS.fs [--mount M] [--local-dir DIR] -- COMMAND...`: serve a dataset on this
// machine without Slurm. Filled in by the single-node serving work.
#include <cstdio>

#include "stagein/cli.h"

namespace fanstore::cli {

int CmdRun(int argc, char** argv) {
  std::fprintf(stderr, "fanstore: run: not available in this build yet\n");
  return kExitUsage;
}

}  // namespace fanstore::cli
