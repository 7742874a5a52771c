#include "common/xattrs.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include "common/testing/temp_dir.h"

namespace fanstore::xattrs {
namespace {

// getxattr(2) and listxattr(2) answered from an encoded list, as the kernel answers them.
TEST(Xattrs, GetAndListFollowTheSyscalls) {
  const std::string enc = Encode({{"user.b", "second"}, {"user.a", "first"}, {"user.a", "dup"}});
  std::string why;
  ASSERT_TRUE(Valid(enc, &why)) << why;
  EXPECT_EQ(Decode(enc).size(), 2u);  // the repeated name once, the first value
  char buf[64];
  EXPECT_EQ(Get(enc, "user.a", nullptr, 0), 5);  // size 0: the length
  EXPECT_EQ(Get(enc, "user.a", buf, sizeof buf), 5);
  EXPECT_EQ(std::string(buf, 5), "first");
  EXPECT_EQ(Get(enc, "user.b", buf, 3), -ERANGE);
  EXPECT_EQ(Get(enc, "user.c", buf, sizeof buf), -ENODATA);
  EXPECT_EQ(Get(enc, "security.selinux", buf, sizeof buf), -ENODATA);
  EXPECT_EQ(Get("", "user.a", buf, sizeof buf), -ENODATA);
  EXPECT_EQ(List(enc, nullptr, 0), 14);
  EXPECT_EQ(List(enc, buf, 5), -ERANGE);
  ASSERT_EQ(List(enc, buf, sizeof buf), 14);
  EXPECT_EQ(std::string(buf, 14), std::string("user.a\0user.b\0", 14));
  EXPECT_EQ(List("", buf, sizeof buf), 0);
}

TEST(Xattrs, OnlyTheUserNamespaceIsCarried) {
  EXPECT_TRUE(Carried("user.x"));
  EXPECT_FALSE(Carried("user."));
  EXPECT_FALSE(Carried("security.capability"));
  EXPECT_FALSE(Carried("trusted.overlay.opaque"));
  EXPECT_FALSE(Carried("system.posix_acl_access"));
  EXPECT_FALSE(Carried(std::string(300, 'u')));
}

// What pack reads from a real file: the user namespace only, sorted, with empty values.
TEST(Xattrs, ReadFromFileTakesTheUserNamespace) {
  test::TempDir dir("xattrs");
  const std::string f = dir.path() + "/f";
  FILE* fp = fopen(f.c_str(), "w");
  ASSERT_NE(fp, nullptr);
  fclose(fp);
  std::string enc;
  ASSERT_EQ(ReadFromFile(f, &enc), 0);
  EXPECT_TRUE(enc.empty());
  if (::setxattr(f.c_str(), "user.z", "1", 1, 0) != 0) GTEST_SKIP() << "no user xattrs here";
  const std::string big(3000, 'v');  // larger than the first buffer; ext4 keeps 4 KiB
  ASSERT_EQ(::setxattr(f.c_str(), "user.a", big.data(), big.size(), 0), 0);
  ASSERT_EQ(::setxattr(f.c_str(), "user.empty", "", 0, 0), 0);
  ASSERT_EQ(ReadFromFile(f, &enc), 0);
  const auto attrs = Decode(enc);
  ASSERT_EQ(attrs.size(), 3u);
  EXPECT_EQ(attrs[0].first, "user.a");
  EXPECT_EQ(attrs[0].second, big);
  EXPECT_EQ(attrs[1].first, "user.empty");
  EXPECT_EQ(attrs[1].second, "");
  EXPECT_EQ(attrs[2].second, "1");
  EXPECT_EQ(ReadFromFile(dir.path() + "/missing", &enc), ENOENT);
}

}  // namespace
}  // namespace fanstore::xattrs
