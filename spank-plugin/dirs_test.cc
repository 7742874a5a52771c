#include "spank-plugin/dirs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::spank {
namespace {

constexpr uid_t kUser = 54321, kOther = 54322;

class ClaimDirTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"claim-test"};
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "ClaimDir runs as root";
    base_ = tmp_.path();
    ::chmod(base_.c_str(), 01777);  // like /dev/shm and /tmp
  }
  static struct stat Lstat(const std::string& p) {
    struct stat st = {};
    ::lstat(p.c_str(), &st);
    return st;
  }
  std::string base_;
};

TEST_F(ClaimDirTest, CreatesAPrivateDirectoryOfTheUser) {
  std::string moved;
  ASSERT_TRUE(ClaimDir(base_ + "/job", kUser, kUser, &moved).ok());
  const struct stat st = Lstat(base_ + "/job");
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, kUser);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(moved, "");
}

TEST_F(ClaimDirTest, MovesAsideWhatAnotherUserPlanted) {
  // F4: a file, a directory and a symlink planted under the job's names.
  const std::string file = base_ + "/f", dir = base_ + "/d", link = base_ + "/l",
                    victim = base_ + "/victim";
  UniqueFD(::open(file.c_str(), O_WRONLY | O_CREAT, 0666));
  ::mkdir(dir.c_str(), 0777);
  ::mkdir(victim.c_str(), 0700);
  ::symlink(victim.c_str(), link.c_str());
  for (const std::string& p : {file, dir, link}) ::lchown(p.c_str(), kOther, kOther);
  for (const std::string& p : {file, dir, link}) {
    std::string moved;
    ASSERT_TRUE(ClaimDir(p, kUser, kUser, &moved).ok()) << p;
    const struct stat st = Lstat(p);
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << p;
    EXPECT_EQ(st.st_uid, kUser) << p;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << p;
    ASSERT_NE(moved, "") << p;
    EXPECT_EQ(Lstat(moved).st_uid, kOther) << "the planted object is kept, not deleted: " << moved;
  }
  EXPECT_EQ(Lstat(victim).st_uid, 0u);  // the symlink's target was not touched
}

TEST_F(ClaimDirTest, KeepsTheUsersOwnDirectory) {
  const std::string d = base_ + "/mine";
  ::mkdir(d.c_str(), 0700);
  ::chown(d.c_str(), kUser, kUser);
  UniqueFD(::open((d + "/keep").c_str(), O_WRONLY | O_CREAT, 0600));
  std::string moved;
  ASSERT_TRUE(ClaimDir(d, kUser, kUser, &moved).ok());
  EXPECT_EQ(moved, "");
  EXPECT_EQ(::access((d + "/keep").c_str(), F_OK), 0);
}

TEST_F(ClaimDirTest, LeavesADirectoryAUserOwnsAlone) {
  const std::string parent = base_ + "/users", d = parent + "/x";
  ::mkdir(parent.c_str(), 0755);
  ::chown(parent.c_str(), kUser, kUser);
  std::string moved;
  ASSERT_TRUE(ClaimDir(d, kUser, kUser, &moved).ok());
  EXPECT_NE(::access(d.c_str(), F_OK), 0);  // root does not work inside a user's directory
}

struct stat Lstat(const std::string& p) {
  struct stat st = {};
  ::lstat(p.c_str(), &st);
  return st;
}

TEST(EnsureOwnDir, RefusesWhatIsNotTheUsers) {
  test::TempDir tmp("own-test");
  const std::string& base = tmp.path();
  EXPECT_TRUE(EnsureOwnDir(base + "/a").ok());
  EXPECT_TRUE(EnsureOwnDir(base + "/a").ok());
  EXPECT_EQ(Lstat(base + "/a").st_mode & 07777, 0700u);
  ::symlink((base + "/a").c_str(), (base + "/l").c_str());
  EXPECT_FALSE(EnsureOwnDir(base + "/l").ok());
  if (::geteuid() == 0) {
    ::mkdir((base + "/o").c_str(), 0700);
    ::chown((base + "/o").c_str(), kOther, kOther);
    Status st = EnsureOwnDir(base + "/o");
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("uid " + std::to_string(kOther)), std::string::npos)
        << st.ToString();
  }
}

}  // namespace
}  // namespace fanstore::spank

namespace fanstore::spank {
namespace {

// In a child (the namespace is the process's own): the copy is read-only there, by every route,
// and stays writable for the parent, as for the agent on a node.
TEST(ReadOnlyView, TheTaskCannotWriteTheNodeStillCan) {
  if (::geteuid() != 0) GTEST_SKIP() << "mount namespaces need root";
  test::TempDir t("rov");
  const std::string dir = t.path() + "/local", file = dir + "/data/f";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir + "/data").c_str(), 0700), 0);
  { UniqueFD fd(::open(file.c_str(), O_WRONLY | O_CREAT, 0400)); }
  pid_t pid = ::fork();
  if (pid == 0) {
    int bad = 0;
    Status st = ReadOnlyView(dir, ::getuid());
    if (!st.ok()) {
      std::fprintf(stderr, "ReadOnlyView: %s\n", st.ToString().c_str());
      ::_exit(10);
    }
    bad += ::open(file.c_str(), O_WRONLY) >= 0 || errno != EROFS;
    bad += ::unlink(file.c_str()) == 0 || errno != EROFS;
    bad += ::open((dir + "/data/new").c_str(), O_WRONLY | O_CREAT, 0600) >= 0 || errno != EROFS;
    bad += ::chmod(file.c_str(), 0600) == 0 || errno != EROFS;
    ::_exit(bad);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  UniqueFD fd(::open((dir + "/data/new").c_str(), O_WRONLY | O_CREAT, 0600));
  EXPECT_TRUE(fd.valid()) << "the parent's view must stay writable";
  EXPECT_FALSE(ReadOnlyView(dir, ::getuid() + 1).ok());  // not the job user's
}

}  // namespace
}  // namespace fanstore::spank
