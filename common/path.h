// Paths: dataset-relative ones ("a/b/c"), as the format, the table and the interceptor use them,
// and the rules for paths given on a command line or in a configuration.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace fanstore {

// `p` without its trailing slashes ("/data/x.fs/" is "/data/x.fs"), except that a path of
// slashes alone stays "/": it names the root, which "" would not. Nothing else is changed.
inline std::string TrimTrailingSlashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// `p` made absolute against the working directory (unchanged when it already is, or when the
// working directory cannot be had). Nothing else is changed: no symlink is resolved.
inline std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + p;
}

// True when `p` is a plain relative path: not empty, no leading or trailing slash, no empty,
// "." or ".." component, no NUL, and no component longer than `max_component`. Such a path
// names one entry without any lookup of its own, so it can be checked against a table by hash.
inline bool IsCanonicalPath(std::string_view p, size_t max_component = std::string_view::npos) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  size_t start = 0;
  for (;;) {
    const size_t end = p.find('/', start);
    const size_t len = (end == std::string_view::npos ? p.size() : end) - start;
    if (len == 0 || len > max_component) return false;
    if (p[start] == '.' && (len == 1 || (len == 2 && p[start + 1] == '.'))) return false;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return p.find('\0') == std::string_view::npos;
}

// An absolute path other than "/" whose rest is canonical: no "//", "/./", "/../" and no
// trailing '/'. What a mount point or a configured directory must be.
inline bool IsCleanAbsolutePath(std::string_view p) {
  return p.size() >= 2 && p[0] == '/' && IsCanonicalPath(p.substr(1));
}

}  // namespace fanstore
