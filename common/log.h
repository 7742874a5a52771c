// A tiny levelled log for the agent and the command-line tool: "[level] file:line: message".
// Writes to stderr with one write(2) per line, so lines from threads never interleave.
#pragma once

#include <cstdarg>

namespace fanstore::log {

enum Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLevel(Level level);
Level GetLevel();
// Prefix every line with this tag (e.g. "fanstore-agent[node1]").
void SetTag(const char* tag);
void Write(Level level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace fanstore::log

#define FS_LOG(level, ...)                                                             \
  do {                                                                                 \
    if (::fanstore::log::level <= ::fanstore::log::GetLevel())                         \
      ::fanstore::log::Write(::fanstore::log::level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define LOG_ERROR(...) FS_LOG(kError, __VA_ARGS__)
#define LOG_WARN(...) FS_LOG(kWarn, __VA_ARGS__)
#define LOG_INFO(...) FS_LOG(kInfo, __VA_ARGS__)
#define LOG_DEBUG(...) FS_LOG(kDebug, __VA_ARGS__)
