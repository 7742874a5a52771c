// The archive's namespace: member names as paths, each path once, parents made and checked.
#include "pack/archive_tree.h"

#include <gtest/gtest.h>

namespace fanstore::pack {
namespace {

using format::EntryType;

TEST(MemberPath, DropsRootDotsAndEmptyComponentsRefusesDotDot) {
  std::string p;
  ASSERT_TRUE(MemberPath("", "/./a//b/.", &p));
  EXPECT_EQ(p, "a/b");
  ASSERT_TRUE(MemberPath("x", "./", &p));
  EXPECT_EQ(p, "x");
  ASSERT_TRUE(MemberPath("x", "c", &p));
  EXPECT_EQ(p, "x/c");
  EXPECT_FALSE(MemberPath("", "a/../b", &p));
}

TEST(PathKeySet, HoldsWhatWasInsertedAcrossGrowth) {
  PathKeySet set;
  EXPECT_FALSE(set.Contains(set.Key("a")));
  for (int i = 0; i < 100000; i++) set.Insert(set.Key("f" + std::to_string(i)));
  for (int i = 0; i < 100000; i += 997) EXPECT_TRUE(set.Contains(set.Key("f" + std::to_string(i))));
  EXPECT_FALSE(set.Contains(set.Key("g1")));
}

TEST(ArchiveTree, MakesParentsOnceAndListedDirectoriesTakeTheirAttributes) {
  ArchiveTree t;
  ASSERT_TRUE(t.Claim("a/b/f", EntryType::kFile, 5).ok());
  ASSERT_TRUE(t.Claim("a/b/g", EntryType::kFile, 6).ok());
  EXPECT_TRUE(t.HasFile("a/b/f"));
  EXPECT_TRUE(t.HasNonFile("a") && t.HasNonFile("a/b"));
  ASSERT_EQ(t.nonfiles().size(), 2u);  // a/b, then a
  EXPECT_EQ(t.nonfiles()[0].rel, "a/b");
  EXPECT_EQ(t.nonfiles()[0].mode, 0755u);
  ASSERT_TRUE(t.AddDir("a/b", 0700, 9).ok());  // listed after its file
  t.SetDirAttrs("a/b", 10, "x");
  ASSERT_EQ(t.nonfiles().size(), 2u);
  EXPECT_EQ(t.nonfiles()[0].mode, 0700u);
  EXPECT_EQ(t.nonfiles()[0].mtime_ns, 9);
  EXPECT_EQ(t.nonfiles()[0].ctime_ns, 10);
  EXPECT_EQ(t.nonfiles()[0].xattrs, "x");
  ASSERT_TRUE(t.AddLink("a/l", EntryType::kSymlink, 0777, 1, "b/f").ok());
  ASSERT_TRUE(t.AddLink("h", EntryType::kHardLink, 0644, 1, "a/b/f").ok());
  EXPECT_EQ(t.nonfiles()[3].target, "a/b/f");
  EXPECT_EQ(t.nonfiles()[3].size, 5u);
}

TEST(ArchiveTree, RefusesAPathTwiceOrBelowAFileOrSymlink) {
  ArchiveTree t;
  ASSERT_TRUE(t.Claim("f", EntryType::kFile, 0).ok());
  ASSERT_TRUE(t.AddLink("l", EntryType::kSymlink, 0777, 0, "f").ok());
  ASSERT_TRUE(t.AddDir("d", 0755, 0).ok());
  EXPECT_FALSE(t.Claim("f", EntryType::kFile, 0).ok());
  EXPECT_FALSE(t.AddDir("f", 0755, 0).ok());
  EXPECT_FALSE(t.Claim("d", EntryType::kFile, 0).ok());
  EXPECT_FALSE(t.AddLink("f", EntryType::kSymlink, 0777, 0, "d").ok());
  EXPECT_FALSE(t.Claim("f/x", EntryType::kFile, 0).ok());
  EXPECT_FALSE(t.Claim("l/x", EntryType::kFile, 0).ok());
  EXPECT_TRUE(t.Claim("d/x", EntryType::kFile, 0).ok());
}

}  // namespace
}  // namespace fanstore::pack
