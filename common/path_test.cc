#include "common/path.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace fanstore {
namespace {

TEST(TrimTrailingSlashes, DropsTrailingSlashesOnly) {
  const std::pair<const char*, const char*> cases[] = {{"/data/x.fs/", "/data/x.fs"},
                                                       {"/data/x.fs///", "/data/x.fs"},
                                                       {"/data/x.fs", "/data/x.fs"},
                                                       {"a/b/", "a/b"},
                                                       {"a", "a"},
                                                       {"", ""},
                                                       {"//a//b//", "//a//b"},
                                                       {"./", "."},
                                                       {"../", ".."}};
  for (const auto& [in, out] : cases) EXPECT_EQ(TrimTrailingSlashes(in), out) << "'" << in << "'";
}

TEST(TrimTrailingSlashes, TheRootStaysTheRoot) {
  // "" would be no path at all (or the current directory), never the root.
  for (const char* root : {"/", "//", "////"}) EXPECT_EQ(TrimTrailingSlashes(root), "/") << root;
}

TEST(IsCanonicalPath, PlainRelativePathsPass) {
  for (const char* ok : {"a", "a/b", "a/b/c.txt", "...", "..a", ".a", "a.", "a/.b/..c", "a b/c"})
    EXPECT_TRUE(IsCanonicalPath(ok)) << ok;
}

TEST(IsCanonicalPath, AnythingNeedingALookupFails) {
  for (const char* bad : {"", "/", "/a", "a/", "a//b", "//a", ".", "..", "./a", "a/.", "a/./b",
                          "../a", "a/..", "a/../b"})
    EXPECT_FALSE(IsCanonicalPath(bad)) << "'" << bad << "'";
}

TEST(IsCanonicalPath, NulIsRefused) {
  EXPECT_FALSE(IsCanonicalPath(std::string("a\0b", 3)));
  EXPECT_FALSE(IsCanonicalPath(std::string("a/\0", 3)));
}

TEST(IsCanonicalPath, ComponentLengthIsBounded) {
  const std::string c255(255, 'x'), c256(256, 'x');
  EXPECT_TRUE(IsCanonicalPath(c255, 255));
  EXPECT_TRUE(IsCanonicalPath("a/" + c255 + "/b", 255));
  EXPECT_FALSE(IsCanonicalPath(c256, 255));
  EXPECT_FALSE(IsCanonicalPath("a/" + c256 + "/b", 255));
  EXPECT_FALSE(IsCanonicalPath("a/" + c256, 255));
  EXPECT_TRUE(IsCanonicalPath(std::string(10000, 'y')));  // no bound unless one is given
}

}  // namespace
}  // namespace fanstore
