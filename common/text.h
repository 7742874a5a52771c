// Parsing and printing of the numbers and lists that users type: sizes, counts, comma lists.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
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

// The values of an option that more than one program takes: when the files are unpacked
// (fanstore-agent --unpack, fanstore run --unpack, --fanstore-unpack).
inline constexpr std::array<std::string_view, 3> kUnpackModes{"auto", "eager", "lazy"};
// Whether `word` is one of `words`.
bool IsOneOf(std::string_view word, std::span<const std::string_view> words);
// "auto, eager or lazy".
std::string ListWords(std::span<const std::string_view> words);

}  // namespace fanstore
