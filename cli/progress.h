// The progress line of long commands (pack, verify, extract), as a pure function so that its
// layout is tested exactly, and the terminal side that redraws it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fanstore::cli {

// One progress line, at most `width` columns, no newline:
//   "pack [=====>    ]  45%  1.2 MiB / 2.7 MiB  12/30 files  3.4 MiB/s  ETA 0:05"
// total_bytes 0: the total is unknown (no bar, percentage or ETA). total_files 0: files are
// shown only when some are done. seconds 0: no rate and no ETA yet ("--"). The bar shrinks,
// then goes, on narrow terminals; what still does not fit is cut at `width`.
std::string FormatProgress(const std::string& what, uint64_t done_bytes, uint64_t total_bytes,
                           uint64_t done_files, uint64_t total_files, double seconds, int width);

// "M:SS", or "H:MM:SS" from an hour; "--:--" for a negative, unknown or absurd (100 h) span.
std::string FormatDuration(double seconds);

// Progress on stderr: one line redrawn with \r at most 10 times a second and ended with a newline
// by Done. Shown only when stderr is a terminal, or when forced (--progress); never when quiet.
class Progress {
 public:
  enum class Mode { kQuiet, kAuto, kForced };
  Progress(const char* what, Mode mode);
  void Update(uint64_t done, uint64_t total, uint64_t files_done = 0, uint64_t files_total = 0);
  // Draws the last update if the throttle held it back, and ends the line.
  void Done();
  double Seconds() const;

 private:
  void Draw();

  const char* what_;
  bool enabled_;
  bool shown_ = false, pending_ = false;
  size_t last_len_ = 0;
  uint64_t done_ = 0, total_ = 0, files_done_ = 0, files_total_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

}  // namespace fanstore::cli
