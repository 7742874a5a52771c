#include "common/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "common/remove_tree.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore {
namespace {

class PrivateDirTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"private-dir-test"};
  void SetUp() override {
    base_ = tmp_.path();
    dir_ = base_ + "/run";
  }
  mode_t Mode(const std::string& p) {
    struct stat st;
    EXPECT_EQ(::lstat(p.c_str(), &st), 0);
    return st.st_mode;
  }
  std::string base_, dir_;
};

TEST_F(PrivateDirTest, CreatesAMissingDirectory0700) {
  const mode_t old = ::umask(0);  // the mode must not depend on the caller's umask
  bool created = false;
  Status s = EnsureOwnDir(dir_, &created);
  ::umask(old);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(created);
  EXPECT_TRUE(S_ISDIR(Mode(dir_)));
  EXPECT_EQ(Mode(dir_) & 07777, 0700u);
}

TEST_F(PrivateDirTest, TakesAnExistingOwnDirectoryAndTightensItsMode) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  bool created = true;
  ASSERT_TRUE(EnsureOwnDir(dir_, &created).ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(Mode(dir_) & 07777, 0700u);
  EXPECT_TRUE(EnsureOwnDir(dir_).ok());  // the out-parameter is optional
}

TEST_F(PrivateDirTest, RefusesASymlinkEvenToAnOwnDirectory) {
  const std::string real = base_ + "/real";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), dir_.c_str()), 0);
  Status s = EnsureOwnDir(dir_);
  EXPECT_EQ(s.code(), Status::Code::kPermission) << s.ToString();
  EXPECT_NE(s.message().find(dir_), std::string::npos);
  EXPECT_NE(s.message().find("symlink"), std::string::npos);
}

TEST_F(PrivateDirTest, RefusesAFile) {
  UniqueFD f(::open(dir_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  Status s = EnsureOwnDir(dir_);
  EXPECT_EQ(s.code(), Status::Code::kPermission) << s.ToString();
  EXPECT_NE(s.message().find("not a directory"), std::string::npos);
}

TEST_F(PrivateDirTest, RefusesADirectoryOfAnotherUserNamingTheOwner) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
  if (::chown(dir_.c_str(), 65534, 65534) != 0) GTEST_SKIP() << "chown needs root";
  Status s = EnsureOwnDir(dir_);
  EXPECT_EQ(s.code(), Status::Code::kPermission) << s.ToString();
  EXPECT_NE(s.message().find("uid 65534"), std::string::npos) << s.ToString();
  EXPECT_EQ(Mode(dir_) & 07777, 0755u);  // another's directory is left as it was
}

TEST_F(PrivateDirTest, AMissingParentIsNotFound) {
  Status s = EnsureOwnDir(base_ + "/no/such");
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
}

// Issue 30, finding 4: with local_dir=/tmp/%u, another user who makes /tmp/alice first could
// swap the job's directory below it for one of their own.
TEST_F(PrivateDirTest, RefusesAParentOfAnotherUser) {
  const std::string theirs = base_ + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  if (::chown(theirs.c_str(), 65534, 65534) != 0) GTEST_SKIP() << "chown needs root";
  Status s = EnsureOwnDir(theirs + "/job");
  EXPECT_EQ(s.code(), Status::Code::kPermission) << s.ToString();
  EXPECT_NE(s.message().find(theirs + " belongs to uid 65534"), std::string::npos) << s.ToString();
  struct stat st;
  EXPECT_NE(::lstat((theirs + "/job").c_str(), &st), 0);  // nothing made there
}

TEST_F(PrivateDirTest, RefusesAParentOthersMayWriteWithoutTheStickyBit) {
  const std::string open = base_ + "/open", sticky = base_ + "/sticky";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  ASSERT_EQ(::mkdir(sticky.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  Status s = EnsureOwnDir(open + "/job");
  EXPECT_EQ(s.code(), Status::Code::kPermission) << s.ToString();
  EXPECT_NE(s.message().find("without the sticky bit"), std::string::npos) << s.ToString();
  EXPECT_TRUE(EnsureOwnDir(sticky + "/job").ok());  // as /tmp
}

// Issue 30, finding 3: a symlink above the last component is never followed.
TEST_F(PrivateDirTest, RefusesASymlinkAboveTheLastComponent) {
  const std::string real = base_ + "/real", link = base_ + "/link";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  Status s = EnsureOwnDir(link + "/job");
  EXPECT_EQ(s.code(), Status::Code::kPermission) << s.ToString();
  EXPECT_NE(s.message().find(link + " is a symlink"), std::string::npos) << s.ToString();
  struct stat st;
  EXPECT_NE(::lstat((real + "/job").c_str(), &st), 0);
  auto fd = OpenTrustedDir(link + "/", ::geteuid());
  EXPECT_FALSE(fd.ok());
  auto ok = OpenTrustedDir(real + "//", ::geteuid(), true);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST_F(PrivateDirTest, ARelativePathIsTakenAgainstTheWorkingDirectory) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(base_.c_str()), 0);
  Status s = EnsureOwnDir("rel");
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(S_ISDIR(Mode(base_ + "/rel")));
}

}  // namespace
}  // namespace fanstore
