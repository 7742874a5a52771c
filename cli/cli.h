// Shared pieces of the `fanstore` command: exit statuses, error reporting, progress, and one
// entry point per subcommand (each in its own NAME_cmd.cc, with its options and its handler).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "cli/progress.h"
#include "common/args.h"
#include "common/status.h"

namespace fanstore::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBad = 1;
inline constexpr int kExitUsage = args::kExitUsage;

// Set by SIGINT and SIGTERM (main.cc): a pack stops at its next file.
extern std::atomic<bool> g_cancel;

// Prints "fanstore: <s>" and returns the exit status: 2 for a bad argument, else 1.
int Fail(const Status& s);

// The parser of `fanstore NAME`, with the common help layout.
void Configure(CLI::App& app, std::string usage_tail = "");

// --threads N (1 to args::kMaxThreads; default: all cores), what they do in `what`.
void AddThreads(CLI::App& app, size_t* threads, const std::string& what);
// -q, --quiet.
void AddQuiet(CLI::App& app, bool* quiet);

// The directory of the running `fanstore` binary: the other tools are found beside it.
std::string SelfDir();

// "a/b" from "/a/b/", "" from "/" and ".": a path inside a dataset as the user may type it.
std::string DatasetPath(std::string p);

// --progress: the progress line even when stderr is not a terminal.
void AddProgress(CLI::App& app, bool* force);
// The progress line's mode from -q and --progress (-q wins).
Progress::Mode ProgressMode(bool quiet, bool force);

// The subcommands. argv[0] is the subcommand's name; each returns the exit status.
int CmdPack(int argc, char** argv);
int CmdVerify(int argc, char** argv);
int CmdLs(int argc, char** argv);
int CmdCat(int argc, char** argv);
int CmdExtract(int argc, char** argv);
int CmdInfo(int argc, char** argv);
int CmdRun(int argc, char** argv);
int CmdStats(int argc, char** argv);
int CmdDoctor(int argc, char** argv);

}  // namespace fanstore::cli
