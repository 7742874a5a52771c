// The progress line (see progress.h).
#include "cli/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/clock.h"
#include "common/text.h"

namespace fanstore::cli {
namespace {

constexpr int kMaxBar = 30, kMinBar = 10;

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds >= 100 * 3600.0) return "--:--";
  const uint64_t s = static_cast<uint64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", (unsigned long long)(s / 3600),
                  (unsigned long long)(s / 60 % 60), (unsigned long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%llu:%02llu", (unsigned long long)(s / 60),
                  (unsigned long long)(s % 60));
  return buf;
}

std::string FormatProgress(const std::string& what, uint64_t done_bytes, uint64_t total_bytes,
                           uint64_t done_files, uint64_t total_files, double seconds, int width) {
  const bool known = total_bytes > 0;
  // long double: done * 100 overflows 64 bits for petabytes.
  const long double frac =
      known ? std::min<long double>(1, static_cast<long double>(done_bytes) / total_bytes) : 0;
  const bool timed = seconds > 0 && std::isfinite(seconds);
  const double rate = timed ? static_cast<double>(done_bytes / seconds) : 0;

  std::string tail;
  if (known) {
    char pct[8];
    std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(frac * 100));
    tail += std::string(pct) + "  " + HumanBytes(static_cast<double>(done_bytes)) + " / " +
            HumanBytes(static_cast<double>(total_bytes));
  } else {
    tail += HumanBytes(static_cast<double>(done_bytes));
  }
  if (total_files)
    tail += "  " + std::to_string(done_files) + "/" + std::to_string(total_files) + " files";
  else if (done_files)
    tail += "  " + std::to_string(done_files) + " files";
  tail += "  " + (timed ? HumanBytes(rate) : std::string("--")) + "/s";
  if (known) {
    const double left = static_cast<double>(total_bytes - std::min(done_bytes, total_bytes));
    tail += "  ETA " + (left == 0  ? FormatDuration(0)
                        : rate > 0 ? FormatDuration(left / rate)
                                   : FormatDuration(-1));
  }

  // "what [bar] tail": the bar takes what the width leaves, up to kMaxBar.
  std::string line = what + " ";
  const int room = width - static_cast<int>(line.size() + tail.size()) - 3;
  if (known && room >= kMinBar) {
    const int bar = std::min(room, kMaxBar);
    const int filled = static_cast<int>(frac * bar);
    std::string b(filled, '=');
    if (filled < bar) b += '>';
    b.resize(bar, ' ');
    line += "[" + b + "] ";
  }
  line += tail;
  if (width >= 0 && line.size() > static_cast<size_t>(width)) line.resize(width);
  return line;
}

Progress::Progress(const char* what, Mode mode)
    : what_(what),
      enabled_(mode == Mode::kForced || (mode == Mode::kAuto && ::isatty(STDERR_FILENO))) {}

void Progress::Update(uint64_t done, uint64_t total, uint64_t files_done, uint64_t files_total) {
  if (!enabled_) return;
  done_ = done, total_ = total, files_done_ = files_done, files_total_ = files_total;
  pending_ = true;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  Draw();
}

void Progress::Draw() {
  struct winsize ws {};
  const int width =
      ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col - 1 : 79;
  std::string line =
      FormatProgress(what_, done_, total_, files_done_, files_total_, Seconds(), width);
  const size_t len = line.size();
  // Spaces over what is left of a longer previous line.
  if (len < last_len_) line.append(last_len_ - len, ' ');
  last_len_ = len;
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
  shown_ = true;
  pending_ = false;
}

void Progress::Done() {
  if (pending_) Draw();
  if (shown_) std::fputs("\n", stderr);
  shown_ = false;
  last_len_ = 0;
}

double Progress::Seconds() const { return SecondsSince(start_); }

}  // namespace fanstore::cli
