// Shared pieces of the `fanstore` command (see cli.h).
#include "cli/cli.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "common/path.h"

namespace fanstore::cli {

std::atomic<bool> g_cancel{false};

int Fail(const Status& s) {
  std::fprintf(stderr, "fanstore: %s\n", s.ToString().c_str());
  return s.code() == Status::Code::kInvalidArgument ? kExitUsage : kExitBad;
}

void Configure(CLI::App& app, std::string usage_tail) {
  args::Configure(app, std::move(usage_tail));
  app.footer("Exit status: 0 success, 1 bad data or failure, 2 usage error.");
}

void AddThreads(CLI::App& app, size_t* threads, const std::string& what) {
  app.add_option("--threads", *threads, what + " threads (default: all cores)")
      ->type_name("N")
      ->check(args::IntRange(1, args::kMaxThreads));
}

void AddQuiet(CLI::App& app, bool* quiet) {
  app.add_flag("-q,--quiet", *quiet, "no progress or summary");
}

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, n);
  return p.substr(0, p.rfind('/'));
}

std::string DatasetPath(std::string p) {
  while (!p.empty() && p.front() == '/') p.erase(0, 1);
  p = TrimTrailingSlashes(std::move(p));  // (no lone "/" is left to keep)
  if (p == ".") p.clear();
  return p;
}

void AddProgress(CLI::App& app, bool* force) {
  app.add_flag("--progress", *force, "show progress even when stderr is not a terminal");
}

Progress::Mode ProgressMode(bool quiet, bool force) {
  return quiet ? Progress::Mode::kQuiet : force ? Progress::Mode::kForced : Progress::Mode::kAuto;
}

}  // namespace fanstore::cli
