#include "common/remove_tree.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/unique_fd.h"

namespace fanstore {
namespace {

class RemoveTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fanstore-rmtree-test-XXXXXX";
    base_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    (void)std::system(("chmod -R u+rwx " + base_ + " 2>/dev/null; rm -rf " + base_).c_str());
  }
  void Touch(const std::string& p, mode_t mode = 0600) {
    UniqueFD fd(::open(p.c_str(), O_WRONLY | O_CREAT, mode));
  }
  std::string base_;
};

TEST_F(RemoveTreeTest, RemovesReadOnlyTreesAndLinksButNotTheirTargets) {
  const std::string t = base_ + "/t", victim = base_ + "/victim";
  ASSERT_EQ(::mkdir(victim.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(victim.c_str(), 0555),
            0);  // read-only: a chmod that follows links would change it
  ASSERT_EQ(::chmod(victim.c_str(), 0755), 0);
  Touch(victim + "/keep");
  ASSERT_EQ(::chmod(victim.c_str(), 0555), 0);
  ASSERT_EQ(::mkdir(t.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((t + "/ro").c_str(), 0700), 0);
  Touch(t + "/ro/f", 0400);
  ASSERT_EQ(::chmod((t + "/ro").c_str(), 0500), 0);
  ASSERT_EQ(::symlink(victim.c_str(), (t + "/link").c_str()), 0);
  ASSERT_EQ(::symlink("victim/keep", (t + "/flink").c_str()), 0);
  ASSERT_TRUE(RemoveTree(t).ok());
  struct stat st;
  EXPECT_NE(::lstat(t.c_str(), &st), 0);
  EXPECT_EQ(::stat((victim + "/keep").c_str(), &st), 0);  // the symlinks' targets stay
  EXPECT_EQ(st.st_mode & 0777, 0600u);                    // and keep their modes (F13)
  EXPECT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);
  EXPECT_TRUE(RemoveTree(t).ok());  // missing is fine
}

TEST_F(RemoveTreeTest, InParallelTheSameTreeGoesAndLinksStillAreNotFollowed) {
  const std::string t = base_ + "/t", victim = base_ + "/victim";
  ASSERT_EQ(::mkdir(victim.c_str(), 0700), 0);
  Touch(victim + "/keep");
  ASSERT_EQ(::mkdir(t.c_str(), 0700), 0);
  Touch(t + "/top-file");
  for (int a = 0; a < 3; a++) {
    const std::string d = t + "/d" + std::to_string(a);
    ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
    Touch(d + "/f");
    ASSERT_EQ(::symlink(victim.c_str(), (d + "/to-victim").c_str()), 0);
    for (int b = 0; b < 5; b++) {
      const std::string e = d + "/e" + std::to_string(b);
      ASSERT_EQ(::mkdir(e.c_str(), 0700), 0);
      ASSERT_EQ(::mkdir((e + "/deeper").c_str(), 0700), 0);
      for (int f = 0; f < 20; f++) Touch(e + "/deeper/f" + std::to_string(f), 0400);
      ASSERT_EQ(::chmod(e.c_str(), 0500), 0);  // read-only directories are emptied too
    }
  }
  ASSERT_EQ(::symlink(victim.c_str(), (t + "/d9").c_str()), 0);  // a link where a directory was
  ASSERT_TRUE(RemoveTree(t, 4).ok());
  struct stat st;
  EXPECT_NE(::lstat(t.c_str(), &st), 0);
  EXPECT_EQ(::stat((victim + "/keep").c_str(), &st), 0);
}

TEST_F(RemoveTreeTest, ASymlinkAtTheTopIsRemovedNotFollowed) {
  const std::string victim = base_ + "/victim", link = base_ + "/link";
  ASSERT_EQ(::mkdir(victim.c_str(), 0700), 0);
  Touch(victim + "/keep");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_TRUE(RemoveTree(link).ok());
  struct stat st;
  EXPECT_NE(::lstat(link.c_str(), &st), 0);
  EXPECT_EQ(::stat((victim + "/keep").c_str(), &st), 0);
}

TEST_F(RemoveTreeTest, AVeryDeepTreeCostsNeitherDescriptorsNorLongPaths) {
  // 1,500 levels (a path of about 3 KiB per 1,000 levels is longer than PATH_MAX), removed with
  // only a handful of descriptors to spare.
  const std::string t = base_ + "/deep";
  ASSERT_EQ(::mkdir(t.c_str(), 0700), 0);
  UniqueFD cur(::open(t.c_str(), O_RDONLY | O_DIRECTORY));
  for (int i = 0; i < 1500; i++) {
    ASSERT_EQ(::mkdirat(cur.get(), "dd", 0700), 0);
    UniqueFD next(::openat(cur.get(), "dd", O_RDONLY | O_DIRECTORY));
    ASSERT_TRUE(next.valid());
    if (i % 100 == 0) UniqueFD(::openat(cur.get(), "f", O_WRONLY | O_CREAT, 0600));
    cur = std::move(next);
  }
  cur.Reset();
  struct rlimit old, low;
  ::getrlimit(RLIMIT_NOFILE, &old);
  low = old;
  low.rlim_cur = 64;
  ::setrlimit(RLIMIT_NOFILE, &low);
  Status st = RemoveTree(t);
  ::setrlimit(RLIMIT_NOFILE, &old);
  ASSERT_TRUE(st.ok()) << st.ToString();
  struct stat sb;
  EXPECT_NE(::lstat(t.c_str(), &sb), 0);
}

}  // namespace
}  // namespace fanstore
