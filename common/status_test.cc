#include "common/status.h"

#include <gtest/gtest.h>

namespace fanstore {
namespace {

TEST(Status, OkIsCheapAndDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.ToErrno(), 0);
}

TEST(Status, FromErrnoChoosesCode) {
  EXPECT_TRUE(Status::FromErrno("open x", ENOENT).IsNotFound());
  EXPECT_EQ(Status::FromErrno("write y", ENOSPC).code(), Status::Code::kNoSpace);
  Status s = Status::FromErrno("open /a", EACCES);
  EXPECT_EQ(s.code(), Status::Code::kPermission);
  EXPECT_EQ(s.message(), "open /a: Permission denied");
  EXPECT_EQ(s.ToErrno(), EACCES);
}

TEST(Status, PrefixedAddsContext) {
  Status s = Status::Corruption("bad magic").Prefixed("shard-00001.fsd");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "shard-00001.fsd: bad magic");
  EXPECT_EQ(s.ToErrno(), EIO);
}

TEST(Result, HoldsValueOrStatus) {
  Result<int> a(7);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 7);
  Result<int> b(Status::NotFound("nope"));
  EXPECT_FALSE(b.ok());
  EXPECT_TRUE(b.status().IsNotFound());
}

}  // namespace
}  // namespace fanstore
