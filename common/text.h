// Parsing and printing of the numbers and lists that users type: sizes, counts, comma lists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fanstore {

// "64M", "1GiB", "4096": a positive byte count with an optional binary suffix (K/M/G/T, with or
// without "iB", or B). Overflow and trailing junk are refused.
std::optional<uint64_t> ParseSize(std::string_view text);
// A whole decimal number in [lo, hi]: no sign unless lo < 0, no spaces, no junk.
std::optional<int64_t> ParseInt(std::string_view text, int64_t lo, int64_t hi);
// "1.5 GiB".
std::string HumanBytes(double bytes);
// The pieces of `text` between `sep`s, empty pieces dropped.
std::vector<std::string_view> Split(std::string_view text, char sep);

}  // namespace fanstore
