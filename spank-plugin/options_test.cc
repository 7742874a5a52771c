// Unit tests of the option values and the node count the hooks receive as text.
#include "spank-plugin/options.h"

#include <gtest/gtest.h>

namespace fanstore::spank {
namespace {

TEST(SetUserOption, PathsLoseTrailingSlashes) {
  UserOptions o;
  ASSERT_TRUE(SetUserOption(&o, kOptDataset, "/data/imagenet.fs//").ok());
  ASSERT_TRUE(SetUserOption(&o, kOptMount, "/fanstore/in/").ok());
  EXPECT_EQ(o.dataset, "/data/imagenet.fs");
  EXPECT_EQ(o.mount, "/fanstore/in");
  ASSERT_TRUE(SetUserOption(&o, kOptReplicas, "all").ok());
  ASSERT_TRUE(SetUserOption(&o, kOptStats, "none").ok());
  EXPECT_EQ(o.replicas, "all");
  EXPECT_EQ(o.stats, "none");
}

TEST(SetUserOption, RootStaysRoot) {
  UserOptions o;
  ASSERT_TRUE(SetUserOption(&o, kOptMount, "/").ok());
  EXPECT_EQ(o.mount, "/");
}

TEST(SetUserOption, EmptyValueIsRefusedByName) {
  UserOptions o;
  Status s = SetUserOption(&o, kOptReplicas, "");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "--fanstore-replicas: a value is required");
  EXPECT_TRUE(o.replicas.empty());
}

TEST(SetUserOption, UnpackIsRecordedUnderItsOwnName) {
  UserOptions o;
  EXPECT_STREQ(OptionName(kOptUnpack), "fanstore-unpack");
  ASSERT_TRUE(SetUserOption(&o, kOptUnpack, "eager").ok());
  EXPECT_EQ(o.unpack, "eager");
  EXPECT_TRUE(o.any());
  EXPECT_FALSE(o.used());  // alone it asks for no dataset
  EXPECT_EQ(SetUserOption(&o, kOptUnpack, "lazy").message(),
            "--fanstore-unpack given twice, as 'eager' and 'lazy'");
}

TEST(SetUserOption, SameValueTwiceIsAcceptedDifferentValueIsNot) {
  UserOptions o;
  ASSERT_TRUE(SetUserOption(&o, kOptDataset, "/d/a.fs").ok());
  EXPECT_TRUE(SetUserOption(&o, kOptDataset, "/d/a.fs/").ok());  // Slurm repeats callbacks
  Status s = SetUserOption(&o, kOptDataset, "/d/b.fs");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "--fanstore given twice, as '/d/a.fs' and '/d/b.fs'");
  EXPECT_EQ(o.dataset, "/d/a.fs");
}

TEST(ParseNodeCount, UnsetIsZero) {
  auto n = ParseNodeCount(std::nullopt);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 0u);
}

TEST(ParseNodeCount, Numbers) {
  auto n = ParseNodeCount(std::string("16"));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 16u);
  auto most = ParseNodeCount(std::to_string(kMaxNodes));
  ASSERT_TRUE(most.ok());
  EXPECT_EQ(most.value(), static_cast<uint32_t>(kMaxNodes));
}

TEST(ParseNodeCount, AnythingElseIsAnErrorNamingTheValue) {
  for (const char* bad : {"", "0", "-3", "4x", " 4", "4 ", "1e3", "99999999999999999999"}) {
    auto n = ParseNodeCount(std::string(bad));
    EXPECT_FALSE(n.ok()) << bad;
    if (!n.ok()) {
      EXPECT_NE(n.status().message().find("SLURM_JOB_NUM_NODES='"), std::string::npos);
    }
  }
  EXPECT_FALSE(ParseNodeCount(std::to_string(kMaxNodes + 1)).ok());
}

}  // namespace
}  // namespace fanstore::spank
