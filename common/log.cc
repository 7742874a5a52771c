// The levelled log.
#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace fanstore::log {
namespace {
std::atomic<int> g_level{kInfo};
char g_tag[128] = "fanstore";
const char* const kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void SetLevel(Level level) { g_level = level; }
Level GetLevel() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
void SetTag(const char* tag) { std::snprintf(g_tag, sizeof g_tag, "%s", tag); }

void Write(Level level, const char* file, int line, const char* fmt, ...) {
  char buf[2048];
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  int n;
  if (GetLevel() >= kDebug) {
    n = std::snprintf(buf, sizeof buf, "%s: %s: %s:%d: ", g_tag, kNames[level], base, line);
  } else {
    n = std::snprintf(buf, sizeof buf, "%s: %s: ", g_tag, level == kInfo ? "" : kNames[level]);
    if (level == kInfo) n = std::snprintf(buf, sizeof buf, "%s: ", g_tag);
  }
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len =
      n + (m < 0 ? 0 : (m >= static_cast<int>(sizeof buf) - n - 1 ? sizeof buf - n - 2 : m));
  buf[len++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, buf, len);
  (void)ignored;
}

}  // namespace fanstore::log
