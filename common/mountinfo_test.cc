#include "common/mountinfo.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/testing/temp_dir.h"

namespace fanstore {
namespace {

TEST(MountInfo, ParsesFieldsEscapesAndOptionalFields) {
  const std::string text =
      "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 shared:7 - ext3 /dev/root rw\n"
      "garbage line\n"
      "40 36 0:52 / /mnt/with\\040space rw - tmpfs fanstore.1000.7 rw,size=4k\n";
  const std::vector<MountEntry> m = ParseMountInfo(text);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].id, 36);
  EXPECT_EQ(m[0].parent, 35);
  EXPECT_EQ(m[0].dev, makedev(98, 0));
  EXPECT_EQ(m[0].mount_point, "/mnt/with space");
  EXPECT_EQ(m[0].options, "rw,noatime");
  EXPECT_EQ(m[0].type, "ext3");
  EXPECT_EQ(m[1].type, "tmpfs");
  EXPECT_EQ(m[1].source, "fanstore.1000.7");
  EXPECT_EQ(m[1].dev, makedev(0, 52));
}

TEST(MountInfo, FindsMountsHereAndInOtherNamespaces) {
  const std::vector<MountEntry> proc = MountsAt("/proc");
  ASSERT_FALSE(proc.empty());
  EXPECT_EQ(proc.back().type, "proc");
  if (::geteuid() != 0) GTEST_SKIP() << "mounts need root";
  test::TempDir t("mountinfo");
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    char c = 0;
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("elsewhere", t.path().c_str(), "tmpfs", 0, "size=64k") != 0)
      ::_exit(1);
    struct stat st;
    ::stat(t.path().c_str(), &st);
    (void)!::write(ready[1], &st.st_dev, sizeof st.st_dev);
    (void)!::read(done[0], &c, 1);
    ::_exit(0);
  }
  dev_t dev = 0;
  ASSERT_EQ(::read(ready[0], &dev, sizeof dev), static_cast<ssize_t>(sizeof dev));
  const std::vector<MountCopy> copies = MountsElsewhere(dev);
  (void)!::write(done[1], "x", 1);
  int status;
  ::waitpid(child, &status, 0);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].pid, child);
  EXPECT_EQ(copies[0].mount_point, t.path());
  EXPECT_TRUE(MountsAt(t.path()).empty());  // not in this namespace
}

}  // namespace
}  // namespace fanstore
