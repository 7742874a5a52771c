// Shared pieces of the `fanstore` command (see cli.h).
#include "cli/cli.h"

#include <unistd.h>

#include <cstdio>

#include "common/text.h"

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

std::string DatasetPath(std::string p) {
  while (!p.empty() && p.front() == '/') p.erase(0, 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p == ".") p.clear();
  return p;
}

Progress::Progress(const char* what, bool enabled)
    : what_(what), tty_(enabled && ::isatty(STDERR_FILENO)) {}

void Progress::Update(uint64_t done, uint64_t total, uint64_t files_done, uint64_t files_total) {
  if (!tty_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && done < total) return;
  last_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double frac = total ? static_cast<double>(done) / total : 1.0;
  int width = 30, filled = static_cast<int>(frac * width);
  std::string bar(filled, '=');
  if (filled < width) bar += '>';
  bar.resize(width, ' ');
  std::string files =
      files_total ? "  " + std::to_string(files_done) + "/" + std::to_string(files_total) + " files"
                  : "";
  std::fprintf(stderr, "\r%s [%s] %3.0f%%  %s / %s  %s/s%s   ", what_, bar.c_str(), frac * 100,
               HumanBytes(done).c_str(), HumanBytes(total).c_str(),
               HumanBytes(secs > 0 ? done / secs : 0).c_str(), files.c_str());
  shown_ = true;
}

void Progress::Done() {
  if (shown_) std::fputs("\n", stderr);
  shown_ = false;
}

double Progress::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace fanstore::cli
