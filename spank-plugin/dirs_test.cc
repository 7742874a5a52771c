#include "spank-plugin/dirs.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "common/mountinfo.h"
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

// Issue 30, finding 3: with local_dir=/scratch/%u/%n, the user makes a component of the path a
// symlink to a directory of root's (mount_prefix, say): root must not create there.
TEST_F(ClaimDirTest, FollowsNoSymlinkAboveTheLastComponent) {
  const std::string users = base_ + "/users", rootdir = base_ + "/prefix";
  ASSERT_EQ(::mkdir(users.c_str(), 0755), 0);
  ASSERT_EQ(::chown(users.c_str(), kUser, kUser), 0);
  ASSERT_EQ(::mkdir(rootdir.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(rootdir.c_str(), (users + "/node1").c_str()), 0);
  std::string moved;
  Status st = ClaimDir(users + "/node1/fanstore.54321.9", kUser, kUser, &moved);
  EXPECT_EQ(st.code(), Status::Code::kPermission) << st.ToString();
  EXPECT_NE(st.message().find("symlink"), std::string::npos) << st.ToString();
  EXPECT_NE(::access((rootdir + "/fanstore.54321.9").c_str(), F_OK), 0);
  bool mounted = true, dropped = true;
  EXPECT_FALSE(MountJobFs(users + "/node1/fanstore.54321.9", kUser, kUser, &mounted).ok());
  EXPECT_FALSE(mounted);
  EXPECT_TRUE(
      DropJobFs(users + "/node1/fanstore.54321.9", kUser, &dropped).ok());  // nothing of ours
  EXPECT_FALSE(dropped);
}

// Issue 30, finding 4: an ancestor of another user's (local_dir=/tmp/%u, /tmp/alice made by
// bob) is refused: its owner could swap the job's directory below it.
TEST_F(ClaimDirTest, RefusesAnAncestorOfAnotherUser) {
  const std::string theirs = base_ + "/alice", d = theirs + "/fanstore.54321.9";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0777), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kOther, kOther), 0);
  std::string moved;
  Status st = ClaimDir(d, kUser, kUser, &moved);
  EXPECT_EQ(st.code(), Status::Code::kPermission) << st.ToString();
  EXPECT_NE(st.message().find("belongs to uid " + std::to_string(kOther)), std::string::npos)
      << st.ToString();
  EXPECT_NE(::access(d.c_str(), F_OK), 0);
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
    Status st = PrivateMountNamespace();
    if (st.ok()) st = ReadOnlyView(dir, ::getuid());
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

// Runs `fn` in a child with a namespace of its own; its exit status (0: all well) comes back,
// and what it printed to stderr shows in the test's output.
int InTaskNamespace(const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    Status st = PrivateMountNamespace();
    if (!st.ok()) {
      std::fprintf(stderr, "TaskNamespace: %s\n", st.ToString().c_str());
      ::_exit(100);
    }
    ::_exit(fn());
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

// What /proc/self/mountinfo says is mounted at `path` (the topmost file system's type), or "".
std::string MountedAt(const std::string& path) {
  const std::vector<MountEntry> at = MountsAt(path);
  return at.empty() ? "" : at.back().type;
}

// The options /proc/self/mountinfo lists for what is mounted at `path`, or "".
std::string MountOptions(const std::string& path) {
  const std::vector<MountEntry> at = MountsAt(path);
  return at.empty() ? "" : at.back().options;
}

// The mount point: the path itself when it is a directory; else a tmpfs over its empty
// ancestor, holding the missing components; never a write to the node's file systems.
TEST(MountKernelView, MountsAtThePathOrInATmpfsOverAnEmptyAncestor) {
  if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0)
    GTEST_SKIP() << "FUSE mounts need root and /dev/fuse";
  test::TempDir t("kvm");
  const std::string base = t.path() + "/fanstore", full = t.path() + "/full";
  ASSERT_EQ(::mkdir(base.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(full.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((full + "/ds").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((full + "/other").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(full.c_str(), (t.path() + "/link").c_str()), 0);
  EXPECT_EQ(InTaskNamespace([&] {
              auto dev = MountKernelView(base + "/imagenet/train", 1000, 1000);
              if (!dev.ok()) {
                std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
                return 1;
              }
              // Not touched through the mount: nobody serves it here.
              if (MountedAt(base) != "tmpfs") return 2;
              if (MountedAt(base + "/imagenet/train") != "fuse.fanstore") return 3;
              return 0;
            }),
            0);
  EXPECT_EQ(InTaskNamespace([&] {
              auto dev = MountKernelView(full + "/ds", 1000, 1000);
              if (!dev.ok()) return 1;
              return MountedAt(full + "/ds") == "fuse.fanstore" && MountedAt(full).empty() ? 0 : 2;
            }),
            0);
  // The node saw none of it.
  EXPECT_TRUE(MountedAt(base).empty());
  struct stat st;
  EXPECT_NE(::stat((base + "/imagenet").c_str(), &st), 0);
  // A missing path under a directory that holds something: refused, naming both.
  EXPECT_EQ(InTaskNamespace([&] {
              auto dev = MountKernelView(full + "/new/ds", 1000, 1000);
              if (dev.ok()) return 1;
              const std::string msg = dev.status().message();
              return msg.find(full + "/new does not exist") != std::string::npos &&
                             msg.find(full + " is not empty") != std::string::npos
                         ? 0
                         : 2;
            }),
            0);
  // A symlink on the way: refused.
  EXPECT_EQ(
      InTaskNamespace([&] { return MountKernelView(t.path() + "/link/ds", 1000, 1000).ok(); }), 0);
}

// Only under the admin's prefix, a directory of root's nobody else writes: anywhere else a
// user's dataset could stand in for /etc in their task, read as root's by setuid programs.
TEST(KernelViewAllowed, OnlyUnderARootOwnedPrefix) {
  EXPECT_FALSE(KernelViewAllowed("/fanstore-x/ds", "/fanstore").ok());  // a prefix of the text only
  test::TempDir t("kva");
  const std::string prefix = t.path() + "/prefix";
  ASSERT_EQ(::mkdir(prefix.c_str(), 0755), 0);
  if (::geteuid() == 0) {
    EXPECT_TRUE(KernelViewAllowed(prefix + "/ds", prefix).ok());
    EXPECT_TRUE(KernelViewAllowed(prefix + "/a/b", prefix).ok());
    ::chmod(prefix.c_str(), 0777);
    EXPECT_FALSE(KernelViewAllowed(prefix + "/ds", prefix).ok());  // others could write there
    ::chmod(prefix.c_str(), 0755);
    ASSERT_EQ(::chown(prefix.c_str(), 1000, 1000), 0);
    EXPECT_FALSE(KernelViewAllowed(prefix + "/ds", prefix).ok());  // not root's
  }
  for (const std::string& m : {std::string("/etc"), std::string("/usr/lib/x86_64-linux-gnu"),
                               prefix, prefix + "x/ds", t.path() + "/ds"}) {
    Status st = KernelViewAllowed(m, prefix);
    EXPECT_FALSE(st.ok()) << m;
    EXPECT_NE(st.message().find("not under mount_prefix"), std::string::npos) << st.ToString();
  }
}

// local_fs=auto: the prolog gives the job a tmpfs of its own where local_dir is on tmpfs, limited
// to what was free there; the epilog drops it whole. Never through a symlink the user put in the
// way, and never on a file system that is not tmpfs. In a namespace of the test's own.
TEST(JobFs, MountedOnTmpfsOnlyLimitedToTheFreeSpaceAndDroppedWhole) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounts need root";
  test::TempDir t("jobfs");
  const std::string node = t.path() + "/node", disk = t.path() + "/disk";
  ASSERT_EQ(::chmod(t.path().c_str(), 0755), 0);  // the user's way in
  ASSERT_EQ(::mkdir(node.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(disk.c_str(), 01777), 0);
  EXPECT_EQ(
      InTaskNamespace([&] {
        int step = 0;
        auto fail = [&](const std::string& what) {
          std::fprintf(stderr, "JobFs: %s\n", what.c_str());
          return 100 + step;
        };
        // The node's local storage: a 4 MiB tmpfs of 1,000 inodes, 1 MiB of it in use.
        if (::mount("node", node.c_str(), "tmpfs", 0, "size=4m,nr_inodes=1000,mode=1777") != 0)
          return fail("mount the node's tmpfs");
        {
          UniqueFD used(::open((node + "/used").c_str(), O_WRONLY | O_CREAT, 0600));
          if (::ftruncate(used.get(), 0) || ::posix_fallocate(used.get(), 0, 1 << 20))
            return fail("fill 1 MiB");
        }
        const std::string job = node + "/fanstore.54321.7";
        std::string moved;
        bool mounted = false, dropped = false;
        step = 1;
        if (!ClaimDir(job, kUser, kUser, &moved).ok()) return fail("claim");
        Status st = MountJobFs(job, kUser, kUser, &mounted);
        if (!st.ok() || !mounted || MountedAt(job) != "tmpfs") return fail(st.ToString());
        struct stat sb;
        struct statfs fs;
        step = 2;
        if (::stat(job.c_str(), &sb) || sb.st_uid != kUser || (sb.st_mode & 07777) != 0700)
          return fail("the job's tmpfs is not the user's, 0700");
        if (::statfs(job.c_str(), &fs) || fs.f_blocks * fs.f_bsize > (3u << 20) ||
            fs.f_blocks * fs.f_bsize < (3u << 20) - 65536 || fs.f_files > 1000)
          return fail("limits: " + std::to_string(fs.f_blocks * fs.f_bsize) + " B, " +
                      std::to_string(fs.f_files) + " inodes");
        // nosuid, nodev; and the mount point is root's now: from a namespace where the tmpfs is not
        // mounted, the user cannot rename it away (sticky parent).
        if (MountOptions(job).find("nosuid,nodev") == std::string::npos)
          return fail("options: " + MountOptions(job));
        const pid_t mover = ::fork();
        if (mover == 0) {
          if (::unshare(CLONE_NEWNS) || ::umount2(job.c_str(), MNT_DETACH) ||
              ::setresgid(kUser, kUser, kUser) || ::setresuid(kUser, kUser, kUser))
            ::_exit(2);
          const bool moved = ::rename(job.c_str(), (node + "/moved").c_str()) == 0;
          ::_exit(moved ? 1 : errno == EPERM ? 0 : 3);
        }
        int mst = -1;
        if (::waitpid(mover, &mst, 0) != mover || !WIFEXITED(mst) || WEXITSTATUS(mst) != 0)
          return fail("the user could move the mount point (status " + std::to_string(mst) + ")");
        for (int i = 0; i < 50; i++)
          UniqueFD(::open((job + "/f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT, 0600));
        step = 3;
        st = DropJobFs(job, kUser, &dropped);
        if (!st.ok() || !dropped || !MountedAt(job).empty()) return fail(st.ToString());
        if (::access(job.c_str(), F_OK) == 0) return fail("the mount point is left");
        // Again: nothing mounted, nothing done.
        if (!DropJobFs(job, kUser, &dropped).ok() || dropped) return fail("second drop");
        step = 4;
        // The user swaps the claimed directory for a symlink to one of theirs (or a
        // system directory): neither mount nor unmount goes through it.
        const std::string theirs = node + "/theirs";
        ::mkdir(theirs.c_str(), 0700);
        ::chown(theirs.c_str(), kUser, kUser);
        if (::symlink(theirs.c_str(), job.c_str())) return fail("plant the symlink");
        st = MountJobFs(job, kUser, kUser, &mounted);
        if (st.ok() || mounted || !MountedAt(theirs).empty())
          return fail("mounted through a symlink");
        if (::mount("x", theirs.c_str(), "tmpfs", 0, "mode=0700,uid=54321") != 0)
          return fail("mount theirs");
        if (!DropJobFs(job, kUser, &dropped).ok() || dropped || MountedAt(theirs).empty())
          return fail("unmounted through a symlink");
        step = 5;
        // Another user's directory, or a file system that is not tmpfs: no mount.
        const std::string other = node + "/other";
        ::mkdir(other.c_str(), 0700);
        ::chown(other.c_str(), kOther, kOther);
        if (MountJobFs(other, kUser, kUser, &mounted).ok() || mounted)
          return fail("mounted over another user's directory");
        const std::string on_disk = disk + "/fanstore.54321.7";
        if (::statfs(disk.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) return 0;
        if (!ClaimDir(on_disk, kUser, kUser, &moved).ok() ||
            !MountJobFs(on_disk, kUser, kUser, &mounted).ok() || mounted ||
            !MountedAt(on_disk).empty())
          return fail("mounted on a disk");
        return 0;
      }),
      0);
}

// In a test's own namespace: a node tmpfs at `node` and the job's tmpfs mounted as the prolog
// does, at node/`name`. Its path, or "" (after a message) when either cannot be made.
std::string MountNodeAndJobFs(const std::string& node, const std::string& name) {
  const std::string job = node + "/" + name;
  std::string moved;
  bool mounted = false;
  if (::mount("node", node.c_str(), "tmpfs", 0, "size=64m,mode=1777") != 0 ||
      !ClaimDir(job, kUser, kUser, &moved).ok() || !MountJobFs(job, kUser, kUser, &mounted).ok() ||
      !mounted) {
    std::fprintf(stderr, "JobFs: cannot mount the node's and the job's tmpfs at %s\n", job.c_str());
    return "";
  }
  return job;
}

// Issue 30, finding 1: any user can hold the job's tmpfs with an O_PATH descriptor of its root
// (its path is known), and the job's user can hold directories in it from another job. The
// epilog's unmount is then busy: the tmpfs is detached and emptied through a descriptor, its
// directories root's first, so that nothing it held stays in memory and nothing more can be
// added to it.
TEST(JobFs, ABusyTmpfsIsDetachedAndEmptied) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounts need root";
  test::TempDir t("jobfs-busy");
  const std::string node = t.path() + "/node";
  ASSERT_EQ(::chmod(t.path().c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(node.c_str(), 0755), 0);
  EXPECT_EQ(
      InTaskNamespace([&] {
        auto fail = [&](const std::string& what) {
          std::fprintf(stderr, "JobFs busy: %s\n", what.c_str());
          return 1;
        };
        const std::string job = MountNodeAndJobFs(node, "fanstore.54321.8");
        if (job.empty()) return 1;
        bool dropped = false;
        // The job's files: 8 MiB in a directory of the user's.
        const std::string sub = job + "/data";
        if (::mkdir(sub.c_str(), 0700) != 0 || ::chown(sub.c_str(), kUser, kUser) != 0)
          return fail("mkdir");
        for (int i = 0; i < 8; i++) {
          UniqueFD f(::open((sub + "/f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT, 0600));
          if (!f.valid() || ::posix_fallocate(f.get(), 0, 1 << 20) != 0) return fail("fill");
        }
        UniqueFD pin(::open(job.c_str(), O_PATH | O_CLOEXEC));               // another user's
        UniqueFD held(::open(sub.c_str(), O_RDONLY | O_CLOEXEC));            // the job user's
        UniqueFD file(::open((sub + "/f0").c_str(), O_RDONLY | O_CLOEXEC));  // and a file
        if (!pin.valid() || !held.valid() || !file.valid()) return fail("hold");
        Status st = DropJobFs(job, kUser, &dropped);
        if (st.ok() || !dropped ||
            st.message().find("still held by a descriptor: detached, and emptied") ==
                std::string::npos)
          return fail("drop: " + st.ToString());
        if (!MountedAt(job).empty() || ::access(job.c_str(), F_OK) == 0)
          return fail("still mounted, or the mount point is left");
        struct statfs fs;
        if (::fstatfs(pin.get(), &fs) != 0 || (fs.f_blocks - fs.f_bfree) * fs.f_bsize > 65536)
          return fail("the detached tmpfs still holds " +
                      std::to_string((fs.f_blocks - fs.f_bfree) * fs.f_bsize) + " bytes");
        // The job user, holding a directory of the detached tmpfs, can add nothing to it.
        const pid_t child = ::fork();
        if (child == 0) {
          if (::setresgid(kUser, kUser, kUser) || ::setresuid(kUser, kUser, kUser)) ::_exit(2);
          const int in_sub = ::openat(held.get(), "new", O_WRONLY | O_CREAT, 0600);
          const int in_root = ::openat(pin.get(), "new", O_WRONLY | O_CREAT, 0600);
          ::_exit(in_sub < 0 && in_root < 0 ? 0 : 1);
        }
        int cst = -1;
        if (::waitpid(child, &cst, 0) != child || !WIFEXITED(cst) || WEXITSTATUS(cst) != 0)
          return fail("the job user could still write into the detached tmpfs");
        return 0;
      }),
      0);
}

// Review of issue 30's fix: another user who copies the node's mount namespace into a user
// namespace of his own while the job's tmpfs is mounted keeps it there after it is unmounted
// here (nothing is busy here). And the job's user can stack a FUSE mount (here a tmpfs) over the
// tmpfs's root, which is hers. The epilog empties the first, and detaches the second.
TEST(JobFs, ACopyInAnotherNamespaceIsEmptiedAndAStackedMountDetached) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounts need root";
  test::TempDir t("jobfs-copy");
  const std::string node = t.path() + "/node";
  ASSERT_EQ(::chmod(t.path().c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(node.c_str(), 0755), 0);
  EXPECT_EQ(
      InTaskNamespace([&] {
        auto fail = [&](const std::string& what) {
          std::fprintf(stderr, "JobFs copy: %s\n", what.c_str());
          return 1;
        };
        const std::string job = MountNodeAndJobFs(node, "fanstore.54321.9");
        if (job.empty()) return 1;
        bool dropped = false;
        {
          UniqueFD f(::open((job + "/data").c_str(), O_WRONLY | O_CREAT, 0600));
          if (!f.valid() || ::posix_fallocate(f.get(), 0, 8 << 20) != 0) return fail("fill");
        }
        // The copy: a process in a mount namespace of its own, made while the tmpfs is there.
        int ready[2], done[2];
        if (::pipe(ready) || ::pipe(done)) return fail("pipe");
        const pid_t holder = ::fork();
        if (holder == 0) {
          char c = 0;
          if (::unshare(CLONE_NEWNS) != 0 ||
              ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
            ::_exit(1);
          // A reference that keeps the copy alive when its mount point goes.
          UniqueFD in_copy(::open(job.c_str(), O_PATH | O_CLOEXEC));
          (void)!::write(ready[1], "r", 1);
          (void)!::read(done[0], &c, 1);
          struct statfs fs;  // what the copy holds now
          if (::fstatfs(in_copy.get(), &fs) != 0) ::_exit(2);
          ::_exit((fs.f_blocks - fs.f_bfree) * fs.f_bsize <= 65536 ? 0 : 3);
        }
        char c;
        if (::read(ready[0], &c, 1) != 1) return fail("the holder did not start");
        // The stack: something mounted over the tmpfs's root.
        if (::mount("stacked", job.c_str(), "tmpfs", 0, "size=64k") != 0) return fail("stack");
        Status st = DropJobFs(job, kUser, &dropped);
        (void)!::write(done[1], "d", 1);
        int hst = -1;
        ::waitpid(holder, &hst, 0);
        if (st.ok() || !dropped ||
            st.message().find("still held in another mount namespace (pid " +
                              std::to_string(holder)) == std::string::npos ||
            st.message().find("emptied") == std::string::npos)
          return fail("drop: " + st.ToString());
        if (!WIFEXITED(hst) || WEXITSTATUS(hst) != 0)
          return fail("the copy still holds the job's data (status " + std::to_string(hst) + ")");
        if (!MountedAt(job).empty() || ::access(job.c_str(), F_OK) == 0)
          return fail("something is still mounted, or the mount point is left");
        return 0;
      }),
      0);
}

}  // namespace
}  // namespace fanstore::spank
