#include "interceptor/fd_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace fanstore::interceptor {
namespace {

TEST(FdTable, TrackGetTake) {
  auto t = std::make_unique<FdTable>();
  EXPECT_EQ(t->Get(3), 0u);
  uint64_t s = t->Track(3, 0);
  ASSERT_NE(s, 0u);
  EXPECT_EQ(t->Get(3), s);
  EXPECT_EQ(FdTable::EntryOf(s), 0u);
  EXPECT_TRUE(FdTable::IsEntry(s));
  EXPECT_FALSE(FdTable::IsAncestor(s));
  EXPECT_EQ(t->Get(4), 0u);
  EXPECT_EQ(t->Take(3), s);
  EXPECT_EQ(t->Get(3), 0u);
  EXPECT_EQ(t->Take(3), 0u);
}

TEST(FdTable, GenerationsDistinguishHandOuts) {
  auto t = std::make_unique<FdTable>();
  uint64_t first = t->Track(5, 7);
  uint64_t second = t->Track(5, 7);  // closed and re-opened elsewhere, same entry
  EXPECT_NE(first, second);
  EXPECT_FALSE(t->Untrack(5, first));  // a stale close does not erase the newer record
  EXPECT_EQ(t->Get(5), second);
  EXPECT_TRUE(t->Untrack(5, second));
  EXPECT_EQ(t->Get(5), 0u);
}

TEST(FdTable, AncestorDirectories) {
  auto t = std::make_unique<FdTable>();
  uint64_t s = t->TrackAncestor(9, 12);
  ASSERT_NE(s, 0u);
  EXPECT_TRUE(FdTable::IsAncestor(t->Get(9)));
  EXPECT_FALSE(FdTable::IsEntry(t->Get(9)));
  EXPECT_EQ(FdTable::AncestorLength(t->Get(9)), 12u);
}

TEST(FdTable, RangeAndBounds) {
  auto t = std::make_unique<FdTable>();
  EXPECT_EQ(t->Get(-1), 0u);
  EXPECT_EQ(t->Track(-1, 1), 0u);
  EXPECT_EQ(t->Track(static_cast<int>(FdTable::kCapacity), 1), 0u);
  const int high = 5 * 4096 + 17;  // beyond the first chunks
  ASSERT_NE(t->Track(high, 2), 0u);
  ASSERT_NE(t->Track(10, 3), 0u);
  ASSERT_NE(t->Track(4096, 4), 0u);
  EXPECT_TRUE(t->Set(11, t->Get(10)));  // dup
  EXPECT_EQ(FdTable::EntryOf(t->Get(11)), 3u);
  t->ClearRange(11, ~0ull);
  EXPECT_NE(t->Get(10), 0u);
  EXPECT_EQ(t->Get(11), 0u);
  EXPECT_EQ(t->Get(4096), 0u);
  EXPECT_EQ(t->Get(high), 0u);
  EXPECT_TRUE(t->Set(1 << 20, 0));  // clearing an unmapped chunk maps nothing
}

TEST(FdTable, ConcurrentUse) {
  auto t = std::make_unique<FdTable>();
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; i++) {
    threads.emplace_back([&t, i] {
      for (int round = 0; round < 2000; round++) {
        int fd = i * 5000 + round;  // every thread touches several chunks
        uint64_t s = t->Track(fd, static_cast<uint32_t>(fd));
        ASSERT_EQ(FdTable::EntryOf(t->Get(fd)), static_cast<uint32_t>(fd));
        if (round % 2) {
          ASSERT_TRUE(t->Untrack(fd, s));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; i++) {
    for (int round = 0; round < 2000; round++) {
      EXPECT_EQ(t->Get(i * 5000 + round) != 0, round % 2 == 0);
    }
  }
}

}  // namespace
}  // namespace fanstore::interceptor
