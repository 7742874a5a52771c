// Parsing and printing of user-typed numbers (see text.h).
#include "common/text.h"

#include <charconv>
#include <cstdio>

namespace fanstore {

std::optional<int64_t> ParseInt(std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi) return std::nullopt;
  if (text[0] == '-' && lo >= 0) return std::nullopt;  // "-0" where no sign is allowed
  return v;
}

std::optional<uint64_t> ParseSize(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p == text.data()) return std::nullopt;
  const std::string_view suffix(p, static_cast<size_t>(end - p));
  int shift = 0;
  if (suffix.empty() || suffix == "B")
    shift = 0;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB")
    shift = 10;
  else if (suffix == "M" || suffix == "MiB")
    shift = 20;
  else if (suffix == "G" || suffix == "GiB")
    shift = 30;
  else if (suffix == "T" || suffix == "TiB")
    shift = 40;
  else
    return std::nullopt;
  if (v == 0 || v > (UINT64_MAX >> shift)) return std::nullopt;
  return v << shift;
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    u++;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t at = text.find(sep);
    const std::string_view piece = text.substr(0, at);
    if (!piece.empty()) out.push_back(piece);
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return out;
}

bool IsOneOf(std::string_view word, std::span<const std::string_view> words) {
  for (std::string_view w : words)
    if (w == word) return true;
  return false;
}

std::string ListWords(std::span<const std::string_view> words) {
  std::string out;
  for (size_t i = 0; i < words.size(); i++) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace fanstore
