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
  EXPECT_LT(hi - lo, 100u);  // about 500 each
}

TEST(Placement, AddingANodeMovesFewShards) {
  uint32_t moved = 0;
  for (uint32_t s = 0; s < 1000; s++) moved += Holders(s, 8, 1)[0] != Holders(s, 9, 1)[0];
  EXPECT_LT(moved, 200u);  // about 1/9 move
}

}  // namespace
}  // namespace fanstore::agent
