// `fanstore run DS.fs [--mount M] [--local-dir DIR] -- COMMAND...`: serve a dataset on this
// machine without Slurm.
#include <cstdio>
#include <cstring>

#include "stagein/cli.h"

namespace fanstore::cli {
namespace {

const char kRunHelp[] =
    "Usage: fanstore run DS.fs [--mount PATH] [--local-dir DIR] -- COMMAND [ARGS...]\n"
    "\n"
    "Serves the dataset DS.fs on this machine without Slurm: starts an agent that stages the\n"
    "dataset into DIR, waits until it is ready, runs COMMAND with the interception library\n"
    "so that the dataset appears at PATH, and removes everything when COMMAND ends.\n"
    "Exits with COMMAND's exit status, or 1 when the dataset cannot be served.\n"
    "\n"
    "Options:\n"
    "  --mount PATH      virtual path of the dataset (default /fanstore/NAME, NAME being\n"
    "                    DS.fs without its .fs suffix)\n"
    "  --local-dir DIR   node-local directory for the staged copy (default $TMPDIR or /tmp)\n";

}  // namespace

int CmdRun(int argc, char** argv) {
  for (int i = 1; i < argc && std::strcmp(argv[i], "--"); i++)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kRunHelp, stdout);
      return kExitOk;
    }
  std::fprintf(stderr, "fanstore: run: not available in this build yet\n");
  return kExitUsage;
}

}  // namespace fanstore::cli
