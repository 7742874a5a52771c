#include "common/text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore {
namespace {

TEST(ParseSize, SuffixesAreBinary) {
  EXPECT_EQ(ParseSize("4096"), 4096u);
  EXPECT_EQ(ParseSize("10B"), 10u);
  EXPECT_EQ(ParseSize("512k"), 512u << 10);
  EXPECT_EQ(ParseSize("512K"), 512u << 10);
  EXPECT_EQ(ParseSize("1KiB"), 1024u);
  EXPECT_EQ(ParseSize("64M"), uint64_t{64} << 20);
  EXPECT_EQ(ParseSize("64MiB"), uint64_t{64} << 20);
  EXPECT_EQ(ParseSize("4G"), uint64_t{4} << 30);
  EXPECT_EQ(ParseSize("1GiB"), uint64_t{1} << 30);
  EXPECT_EQ(ParseSize("2T"), uint64_t{2} << 40);
  EXPECT_EQ(ParseSize("3TiB"), uint64_t{3} << 40);
}

TEST(ParseSize, ZeroIsNotASize) {
  EXPECT_EQ(ParseSize("0"), std::nullopt);
  EXPECT_EQ(ParseSize("0G"), std::nullopt);
}

TEST(ParseSize, OverflowIsRefused) {
  EXPECT_EQ(ParseSize("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseSize("18446744073709551616"), std::nullopt);  // does not fit 64 bits
  EXPECT_EQ(ParseSize("16777215T"), uint64_t{16777215} << 40);
  EXPECT_EQ(ParseSize("16777216T"), std::nullopt);  // 2^64
  EXPECT_EQ(ParseSize("17179869184G"), std::nullopt);
  EXPECT_EQ(ParseSize("18014398509481984K"), std::nullopt);
}

TEST(ParseSize, JunkSignsAndSpacesAreRefused) {
  for (const char* bad : {"", "G", "-1", "-4G", "+4G", " 4G", "4G ", "4 G", "1.5G", "4g", "4GB",
                          "4Gi", "4KB", "4m", "0x10", "4GiBx", "abc", "12abc"})
    EXPECT_EQ(ParseSize(bad), std::nullopt) << "'" << bad << "'";
}

TEST(ParseInt, AcceptsWholeNumbersWithinBounds) {
  EXPECT_EQ(ParseInt("42", 0, 100), 42);
  EXPECT_EQ(ParseInt("0", 0, 100), 0);
  EXPECT_EQ(ParseInt("100", 0, 100), 100);
  EXPECT_EQ(ParseInt("-5", -10, 10), -5);
  EXPECT_EQ(ParseInt("9223372036854775807", INT64_MIN, INT64_MAX), INT64_MAX);
  EXPECT_EQ(ParseInt("-9223372036854775808", INT64_MIN, INT64_MAX), INT64_MIN);
}

TEST(ParseInt, RefusesOutOfBoundsSignsAndJunk) {
  EXPECT_EQ(ParseInt("101", 0, 100), std::nullopt);
  EXPECT_EQ(ParseInt("-1", 0, 100), std::nullopt);
  EXPECT_EQ(ParseInt("-0", 0, 100), std::nullopt);  // no sign where lo >= 0
  EXPECT_EQ(ParseInt("-0", -5, 5), 0);
  EXPECT_EQ(ParseInt("-11", -10, 10), std::nullopt);
  EXPECT_EQ(ParseInt("9223372036854775808", INT64_MIN, INT64_MAX), std::nullopt);
  for (const char* bad : {"", "+5", " 5", "5 ", "5x", "x5", "0x10", "1e3", "1.0", "-"})
    EXPECT_EQ(ParseInt(bad, -100, 100), std::nullopt) << "'" << bad << "'";
}

TEST(HumanBytes, PicksTheLargestUnitBelow1024) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(64.0 * (1 << 20)), "64.0 MiB");
  EXPECT_EQ(HumanBytes(1.5 * (1 << 30)), "1.5 GiB");
  EXPECT_EQ(HumanBytes(2.0 * (uint64_t{1} << 40)), "2.0 TiB");
  EXPECT_EQ(HumanBytes(3.0 * (uint64_t{1} << 50)), "3.0 PiB");
  EXPECT_EQ(HumanBytes(2048.0 * (uint64_t{1} << 50)), "2048.0 PiB");  // PiB is the largest
}

TEST(Split, DropsEmptyPieces) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(Split("a,b,c", ','), (V{"a", "b", "c"}));
  EXPECT_EQ(Split(",a,,b,", ','), (V{"a", "b"}));
  EXPECT_EQ(Split("abc", ','), (V{"abc"}));
  EXPECT_EQ(Split("", ','), V{});
  EXPECT_EQ(Split(",,,", ','), V{});
  EXPECT_EQ(Split("a b", ' '), (V{"a", "b"}));
  EXPECT_EQ(Split("a,b", ';'), (V{"a,b"}));
}

TEST(Words, OneOfAndTheirList) {
  EXPECT_TRUE(IsOneOf("lazy", kUnpackModes));
  EXPECT_FALSE(IsOneOf("Lazy", kUnpackModes));
  EXPECT_FALSE(IsOneOf("", kUnpackModes));
  EXPECT_EQ(ListWords(kUnpackModes), "auto, eager or lazy");
  const std::array<std::string_view, 1> one{"only"};
  EXPECT_EQ(ListWords(one), "only");
  EXPECT_EQ(ListWords(std::span<const std::string_view>{}), "");
}

}  // namespace
}  // namespace fanstore
