// The progress line's exact layout.
#include "cli/progress.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace fanstore::cli {
namespace {

TEST(FormatProgress, Start) {
  EXPECT_EQ(FormatProgress("pack", 0, 1000, 0, 10, 0, 80),
            "pack [>                        ]   0%  0 B / 1000 B  0/10 files  --/s  ETA --:--");
}

TEST(FormatProgress, Partial) {
  EXPECT_EQ(FormatProgress("verify", 512ull << 20, 1ull << 30, 0, 0, 2.0, 80),
            "verify [===========>          ]  50%  512.0 MiB / 1.0 GiB  256.0 MiB/s  ETA 0:02");
}

TEST(FormatProgress, Complete) {
  EXPECT_EQ(FormatProgress("extract", 1000, 1000, 5, 5, 4, 80),
            "extract [==================] 100%  1000 B / 1000 B  5/5 files  250 B/s  ETA 0:00");
}

TEST(FormatProgress, BarIsAtMostThirtyWide) {
  EXPECT_EQ(FormatProgress("pack", 3, 4, 0, 0, 1, 200),
            "pack [======================>       ]  75%  3 B / 4 B  3 B/s  ETA 0:00");
}

TEST(FormatProgress, UnknownTotal) {
  EXPECT_EQ(FormatProgress("pack", 2048, 0, 3, 0, 1, 80), "pack 2.0 KiB  3 files  2.0 KiB/s");
}

TEST(FormatProgress, ZeroElapsed) {
  EXPECT_EQ(FormatProgress("pack", 0, 0, 0, 0, 0, 80), "pack 0 B  --/s");
  EXPECT_EQ(FormatProgress("pack", 10, 20, 1, 2, 0, 80),
            "pack [=============>             ]  50%  10 B / 20 B  1/2 files  --/s  ETA --:--");
}

TEST(FormatProgress, HugeNumbers) {
  // No overflow in the percentage; an ETA beyond 100 hours is not given.
  EXPECT_EQ(FormatProgress("pack", UINT64_MAX / 2, UINT64_MAX, UINT64_MAX - 1, UINT64_MAX, 1, 160),
            "pack [==============>               ]  49%  8192.0 PiB / 16384.0 PiB  "
            "18446744073709551614/18446744073709551615 files  8192.0 PiB/s  ETA 0:01");
  EXPECT_EQ(FormatProgress("pack", 1, UINT64_MAX, 0, 0, 1, 80),
            "pack [>                             ]   0%  1 B / 16384.0 PiB  1 B/s  ETA --:--");
}

TEST(FormatProgress, NarrowWidth) {
  // The bar goes first, then the line is cut.
  EXPECT_EQ(FormatProgress("verify", 512, 1024, 0, 0, 1, 50),
            "verify  50%  512 B / 1.0 KiB  512 B/s  ETA 0:01");
  EXPECT_EQ(FormatProgress("verify", 512, 1024, 0, 0, 1, 20), "verify  50%  512 B /");
  EXPECT_EQ(FormatProgress("verify", 512, 1024, 0, 0, 1, 0), "");
}

TEST(FormatDuration, Forms) {
  EXPECT_EQ(FormatDuration(0), "0:00");
  EXPECT_EQ(FormatDuration(59.4), "0:59");
  EXPECT_EQ(FormatDuration(61), "1:01");
  EXPECT_EQ(FormatDuration(3600), "1:00:00");
  EXPECT_EQ(FormatDuration(99 * 3600 + 59 * 60 + 59), "99:59:59");
  EXPECT_EQ(FormatDuration(100 * 3600), "--:--");
  EXPECT_EQ(FormatDuration(-1), "--:--");
}

}  // namespace
}  // namespace fanstore::cli
