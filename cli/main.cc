// `fanstore`: pack, verify, list, read and extract FanStore datasets; `run` serves one locally.
// This file only dispatches: each subcommand, with its options, is in its own NAME_cmd.cc.
// Exit codes: 0 OK, 1 bad data or a failed operation, 2 usage.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "build_commit.h"  // generated: FANSTORE_COMMIT
#include "cli/cli.h"
#include "common/io.h"
#include "common/log.h"
#include "format/format.h"

namespace fanstore::cli {
namespace {

struct Command {
  const char* name;
  const char* synopsis;  // its arguments, for the command list
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"pack", "SRC DST.fs", "pack a directory tree into a dataset", CmdPack},
    {"verify", "DS.fs", "check every hash and structure of a dataset", CmdVerify},
    {"ls", "DS.fs [PATH]", "list entries", CmdLs},
    {"cat", "DS.fs PATH", "write one file to standard output", CmdCat},
    {"extract", "DS.fs DEST", "restore the tree under DEST", CmdExtract},
    {"info", "DS.fs", "print the manifest summary", CmdInfo},
    {"run", "DS.fs -- CMD...", "serve a dataset on this machine and run CMD against it", CmdRun},
    {"stats", "[FILE]", "the agents' counters (inside a FanStore job or run, or saved)", CmdStats},
    {"doctor", "", "check that this node can run FanStore jobs", CmdDoctor},
};

void PrintHelp(FILE* out) {
  std::fputs(
      "Usage: fanstore COMMAND [OPTIONS] ...\n"
      "\n"
      "Job-scoped storage for deep-learning datasets on Slurm clusters.\n"
      "\n"
      "Commands:\n",
      out);
  for (const Command& c : kCommands) {
    const std::string head = std::string(c.name) + (*c.synopsis ? " " : "") + c.synopsis;
    std::fprintf(out, "  %-20s %s\n", head.c_str(), c.summary);
  }
  std::fputs(
      "  version              print the version\n"
      "\n"
      "Run 'fanstore COMMAND --help' for the options of a command.\n"
      "Exit status: 0 success, 1 bad data or failure, 2 usage error.\n",
      out);
}

int Usage(const std::string& error) {
  std::fprintf(stderr, "fanstore: %s\n\n", error.c_str());
  PrintHelp(stderr);
  return kExitUsage;
}

void OnSignal(int) { g_cancel = true; }

}  // namespace

int Main(int argc, char** argv) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  log::SetTag("fanstore");
  if (argc < 2) return Usage("no command given");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    PrintHelp(stdout);
    return kExitOk;
  }
  if (cmd == "version" || cmd == "--version") {
    std::printf("fanstore %s (dataset format v%u, commit %s)\n", FANSTORE_VERSION, format::kVersion,
                FANSTORE_COMMIT);
    return kExitOk;
  }
  // verify, ls, cat and extract keep a dataset's shards open, and a large dataset has thousands
  // (ImageNet-22k: 5,078 of 256 MB) where the usual soft limit is 1,024 descriptors. Not for
  // `run`, whose COMMAND keeps the limits it was given (its agent raises its own as far as its
  // share needs).
  if (cmd != "run") (void)RaiseOpenFileLimit(RLIM_INFINITY);
  for (const Command& c : kCommands)
    if (cmd == c.name) return c.run(argc - 1, argv + 1);
  return Usage("unknown command '" + cmd + "'");
}

}  // namespace fanstore::cli

int main(int argc, char** argv) {
  // The last line of defence: whatever a command's input holds, it ends with a message.
  try {
    return fanstore::cli::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fanstore: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fanstore: internal error: %s\n", e.what());
  }
  return fanstore::cli::kExitBad;
}
