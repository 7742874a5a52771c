// Unit tests of the process and file helpers: starting and supervising children, finding processes
// by their environment, and removing trees without following symlinks.
#include "spank-plugin/proc.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/io.h"
#include "common/testing/temp_dir.h"

namespace fanstore::spank {
namespace {

class ProcTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"proc-test"};
  void SetUp() override { root_ = tmp_.path(); }
  static bool Exists(const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0;
  }
  static bool WaitFor(const std::function<bool()>& cond, int ms = 5000) {
    for (int i = 0; i < ms / 10; i++) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return cond();
  }
  std::string root_;
};

TEST_F(ProcTest, RunCaptureReturnsOutputAndStatus) {
  std::string out;
  auto rc =
      RunCapture({"/bin/sh", "-c", "echo hello $X; exit 3"}, {"X=world"}, nullptr, 5000, &out);
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(rc.value(), 3);
  EXPECT_EQ(out, "hello world\n");
}

TEST_F(ProcTest, RunCaptureKillsAfterTimeout) {
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  auto rc = RunCapture({"/bin/sleep", "30"}, {}, nullptr, 200, &out);
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(rc.value(), -1);
  // Killed, not waited for: sleep would take 30 s.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
}

TEST_F(ProcTest, SpawnWritesItsOutputToTheLog) {
  const std::string log = root_ + "/log";
  auto pid = Spawn({"/bin/sh", "-c",
                    "echo out; echo err >&2; [ \"$(ps -o sid= -p $$)\" -eq $$ ] && echo leader"},
                   {"PATH=/bin:/usr/bin"}, nullptr, log);
  ASSERT_TRUE(pid.ok());
  int status = 0;
  ASSERT_EQ(::waitpid(pid.value(), &status, 0), pid.value());
  auto text = ReadSmallFile(log, 1024);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "out\nerr\nleader\n");
  EXPECT_EQ(TailOfFile(log, 2, ::getuid()), "err\nleader");
}

TEST_F(ProcTest, ProcessStateAndFindByEnvironment) {
  EXPECT_EQ(ProcessState(::getpid()), 'R');
  auto pid = Spawn({"/bin/sleep", "30"}, {"FANSTORE_TEST_MARK=" + root_, "OTHER=1"}, nullptr, "");
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitFor([&] { return ProcessAlive(pid.value()); }));
  std::vector<pid_t> found;
  ASSERT_TRUE(WaitFor([&] {  // the environment is the new one only after execve
    found = FindProcesses(::getuid(), {"FANSTORE_TEST_MARK=" + root_, "OTHER=1"});
    return found.size() == 1;
  }));
  EXPECT_EQ(found[0], pid.value());
  EXPECT_TRUE(FindProcesses(::getuid(), {"FANSTORE_TEST_MARK=" + root_, "OTHER=2"}).empty());
  EXPECT_TRUE(TerminateProcesses(found, 2000, 2000).empty());
  int status = 0;
  ::waitpid(pid.value(), &status, 0);
  EXPECT_FALSE(ProcessAlive(pid.value()));
}

TEST_F(ProcTest, SupervisedLaunchHappensOncePerLock) {
  const std::string lock = root_ + "/job.launch", log = root_ + "/job.launch.log",
                    flag = root_ + "/stop";
  const std::vector<std::string> argv = {
      "/bin/sh", "-c", "echo started; while [ ! -e " + flag + " ]; do sleep 0.05; done"};
  auto first = SpawnSupervised(argv, {}, lock, log);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first.value());
  ASSERT_TRUE(Exists(lock));
  auto second = SpawnSupervised(argv, {}, lock, log);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second.value());  // the first supervisor is alive
  ASSERT_TRUE(WaitFor([&] {
    auto text = ReadSmallFile(log, 100);
    return text.ok() && text.value() == "started\n";
  }));
  std::ofstream(flag) << "";
  EXPECT_TRUE(WaitFor([&] { return !Exists(lock) && !Exists(log); }));  // the supervisor cleans up
}

TEST_F(ProcTest, StaleLockIsTakenOver) {
  const std::string lock = root_ + "/job.launch", log = root_ + "/job.launch.log";
  std::ofstream(lock) << "999999999\n";  // no such process
  auto r = SpawnSupervised({"/bin/true"}, {}, lock, log);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value());
  EXPECT_TRUE(WaitFor([&] { return !Exists(lock); }));
}

TEST_F(ProcTest, RemoveTreeHandlesReadOnlyDirectoriesAndDoesNotFollowSymlinks) {
  const std::string outside = root_ + "/outside";
  ::mkdir(outside.c_str(), 0755);
  std::ofstream(outside + "/keep") << "keep";
  const std::string tree = root_ + "/tree";
  ::mkdir(tree.c_str(), 0755);
  ::mkdir((tree + "/ro").c_str(), 0755);
  std::ofstream(tree + "/ro/file") << "x";
  ::mkdir((tree + "/ro/none").c_str(), 0);
  ::chmod((tree + "/ro").c_str(), 0500);
  ASSERT_EQ(::symlink(outside.c_str(), (tree + "/link").c_str()), 0);
  Status s = RemoveTree(tree);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(Exists(tree));
  EXPECT_TRUE(Exists(outside + "/keep"));
  EXPECT_TRUE(RemoveTree(tree).ok());  // missing is fine
  // A symlink given as the root is removed itself, never its target.
  ASSERT_EQ(::symlink(outside.c_str(), (root_ + "/rootlink").c_str()), 0);
  EXPECT_TRUE(RemoveTree(root_ + "/rootlink").ok());
  EXPECT_TRUE(Exists(outside + "/keep"));
}

TEST_F(ProcTest, ReadPidFileAcceptsOnlyAPid) {
  const std::string f = root_ + "/pid";
  auto pid_of = [&](const std::string& text) {
    std::ofstream(f, std::ios::trunc) << text;
    return ReadPidFile(f);
  };
  EXPECT_EQ(pid_of("1234\n"), 1234);
  EXPECT_EQ(pid_of("1234"), 1234);
  EXPECT_EQ(pid_of(std::to_string(kMaxPid) + "\n"), kMaxPid);
  EXPECT_EQ(pid_of(std::to_string(kMaxPid + 1)), -1);
  for (const char* bad : {"", "0\n", "-5\n", "12x\n", "12\n\n", " 12\n", "1e3"})
    EXPECT_EQ(pid_of(bad), -1) << bad;
  EXPECT_EQ(ReadPidFile(root_ + "/missing"), -1);
}

TEST_F(ProcTest, TailOfFileReadsTheEndOfALargeLog) {
  const std::string log = root_ + "/big.log";
  {
    std::ofstream out(log);
    for (int i = 0; i < 200000; i++) out << "line " << i << "\n";  // about 2.3 MB
  }
  EXPECT_EQ(TailOfFile(log, 2, ::getuid()), "line 199998\nline 199999");
  EXPECT_EQ(TailOfFile(root_ + "/missing", 2, ::getuid()), "");
  // Root reads users' logs: not another owner's file, not through a symlink.
  EXPECT_EQ(TailOfFile(log, 2, ::getuid() + 1), "");
  ASSERT_EQ(::symlink(log.c_str(), (root_ + "/link.log").c_str()), 0);
  EXPECT_EQ(TailOfFile(root_ + "/link.log", 2, ::getuid()), "");
}

TEST(ReadSmallFile, ReadsProcFilesToTheirEnd) {
  // /proc files report a size of 0; the reader must not believe it.
  auto stat = ReadSmallFile("/proc/self/stat", 4096);
  ASSERT_TRUE(stat.ok()) << stat.status().ToString();
  EXPECT_EQ(stat.value().rfind(std::to_string(::getpid()) + " (", 0), 0u);
  EXPECT_FALSE(ReadSmallFile("/proc/self/environ", 1).ok());  // larger than the bound
  auto missing = ReadSmallFile("/proc/self/no-such-file", 64);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
}

TEST_F(ProcTest, RunAsUserRunsInAChild) {
  Credentials me;
  me.uid = ::getuid();
  me.gid = ::getgid();
  me.groups = {me.gid};
  auto rc = RunAsUser(me, 5000, [] { return 7; });
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(rc.value(), 7);
}

}  // namespace

namespace {
TEST(JobLimits, ReadsSlurmsVariablesAndSkipsTheRest) {
  auto l = JobLimits({"SLURM_RLIMIT_NOFILE=1024", "SLURM_RLIMIT_CORE=0", "SLURM_RLIMIT_AS=x1",
                      "SLURM_RLIMIT_BOGUS=5", "SLURM_RLIMIT_STACK=-1", "PATH=/bin",
                      "SLURM_RLIMIT_NPROC="});
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0], std::make_pair(static_cast<int>(RLIMIT_NOFILE), static_cast<rlim_t>(1024)));
  EXPECT_EQ(l[1], std::make_pair(static_cast<int>(RLIMIT_CORE), static_cast<rlim_t>(0)));
}

TEST(JobLimits, UnlimitedIsSlurmsUnsignedInfinity) {
  auto l = JobLimits({"SLURM_RLIMIT_CORE=" + std::to_string(RLIM_INFINITY)});
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0], std::make_pair(static_cast<int>(RLIMIT_CORE), RLIM_INFINITY));
}
}  // namespace
}  // namespace fanstore::spank
