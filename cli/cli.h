// Shared pieces of the `fanstore` command: exit statuses, error reporting, progress, and one
// entry point per subcommand (each in its own NAME_cmd.cc, with its options and its handler).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

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

// "a/b" from "/a/b/", "" from "/" and ".": a path inside a dataset as the user may type it.
std::string DatasetPath(std::string p);

// Progress on a terminal: one redrawn line. Elsewhere: nothing until the summary.
class Progress {
 public:
  Progress(const char* what, bool enabled);
  void Update(uint64_t done, uint64_t total, uint64_t files_done = 0, uint64_t files_total = 0);
  void Done();
  double Seconds() const;

 private:
  const char* what_;
  bool tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

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
