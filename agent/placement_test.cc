#include "agent/placement.h"

#include <gtest/gtest.h>

#include <set>

namespace fanstore::agent {
namespace {

TEST(Placement, DeterministicAndDistinctHolders) {
  for (uint32_t s = 0; s < 50; s++) {
    auto a = Holders(s, 8, 3);
    EXPECT_EQ(a, Holders(s, 8, 3));
    ASSERT_EQ(a.size(), 3u);
    EXPECT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), 3u);
    for (uint32_t r : a) EXPECT_LT(r, 8u);
  }
}

TEST(Placement, ReplicasClampAndFullReplication) {
  EXPECT_EQ(Holders(3, 4, 99).size(), 4u);
  EXPECT_EQ(Holders(3, 4, 0).size(), 1u);
  EXPECT_EQ(Holders(3, 1, 1), std::vector<uint32_t>{0});
  EXPECT_TRUE(Holders(3, 0, 1).empty());
}

TEST(Placement, EveryShardHeldRTimesAndBalanced) {
  const uint32_t shards = 1000, size = 4, r = 2;
  uint32_t total = 0, lo = UINT32_MAX, hi = 0;
  for (uint32_t rank = 0; rank < size; rank++) {
    auto mine = ShardsOf(rank, shards, size, r);
    total += mine.size();
    lo = std::min<uint32_t>(lo, mine.size());
    hi = std::max<uint32_t>(hi, mine.size());
  }
  EXPECT_EQ(total, shards * r);
  EXPECT_EQ(lo, 500u);
  EXPECT_EQ(hi, 500u);
  // Every node has a share as soon as there are as many shards as nodes, and shares differ by
  // at most one shard.
  for (uint32_t n : {2u, 3u, 7u})
    for (uint32_t s = n; s < 3 * n; s++) {
      size_t a = SIZE_MAX, b = 0;
      for (uint32_t rank = 0; rank < n; rank++) {
        a = std::min(a, ShardsOf(rank, s, n, 1).size());
        b = std::max(b, ShardsOf(rank, s, n, 1).size());
      }
      EXPECT_GE(a, 1u);
      EXPECT_LE(b - a, 1u) << s << " shards on " << n << " nodes";
    }
}

}  // namespace
}  // namespace fanstore::agent
