#include "spank-plugin/cleanup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::spank {
namespace {

constexpr uid_t kUser = 54321;

// Issue 30, finding 2: what a job's user leaves on a node must never fail the prolog or the
// epilog, which would drain the node. Each case is one way in; the hook's cleanup must return
// OK, say what it left, and leave the node as clean as it can.
class CleanupTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"cleanup-test"};
  CleanupRequest req_;
  std::string base_, log_path_;
  UniqueFD log_fd_;

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the prolog and the epilog run as root";
    base_ = tmp_.path();
    ::chmod(base_.c_str(), 0755);
    for (const char* d : {"/shm", "/local"}) {
      ASSERT_EQ(::mkdir((base_ + d).c_str(), 0755), 0);
      ASSERT_EQ(::chmod((base_ + d).c_str(), 01777), 0);
    }
    req_.config.run_dir = base_ + "/shm";
    req_.config.local_dir = base_ + "/local";
    req_.config.job_fs = false;
    req_.id.job = 77;
    req_.id.uid = kUser;
    req_.id.user = "u";
    req_.id.node = "n1";
    req_.creds.uid = kUser;
    req_.creds.gid = kUser;
    req_.creds.groups = {kUser};
    // The messages of the cleanup child too: a descriptor both share.
    log_path_ = base_ + "/log";
    log_fd_.Reset(::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    ASSERT_TRUE(log_fd_.valid());
  }
  CleanupLog Log() {
    auto to = [this](const char* level) {
      return [this, level](const std::string& m) {
        const std::string line = std::string(level) + ": " + m + "\n";
        (void)!::write(log_fd_.get(), line.data(), line.size());
      };
    };
    return {to("error"), to("info"), to("verbose")};
  }
  std::string Logged() {
    auto text = ReadSmallFile(log_path_, 1 << 20);
    return text.ok() ? text.value() : "";
  }
  // A directory of the job user's.
  std::string UserDir(const std::string& path) {
    EXPECT_EQ(::mkdir(path.c_str(), 0700), 0);
    EXPECT_EQ(::chown(path.c_str(), kUser, kUser), 0);
    return path;
  }
  static bool Exists(const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0;
  }
};

// A process that carries the agent step's marks, ignores SIGTERM and has memory resident is
// still alive a moment after SIGKILL, while the kernel frees its memory.
TEST_F(CleanupTest, AFakeAgentThatIgnoresSigtermIsWaitedForNotReported) {
  const std::string ready = UserDir(base_ + "/ready") + "/up";
  const std::vector<std::string> env = {"FANSTORE_AGENT_STEP=1", "SLURM_JOB_ID=77",
                                        "SLURMD_NODENAME=n1", "PATH=/usr/bin:/bin"};
  const std::string script =
      "import signal, time\n"
      "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
      "b = b'x' * (1536 << 20)\n"
      "open('" +
      ready +
      "', 'w').close()\n"
      "time.sleep(600)\n";
  auto pid = Spawn({"/usr/bin/python3", "-c", script}, env, &req_.creds, "");
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  for (int i = 0; i < 600 && !Exists(ready); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(Exists(ready)) << "the fake agent did not start";
  req_.agent_grace_ms = 200;
  Status st = CleanJobOnNode(req_, Log());
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(ProcessAlive(pid.value()));
  const std::string log = Logged();
  EXPECT_NE(log.find("ending leftover agent processes of job 77: " + std::to_string(pid.value())),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("error:"), std::string::npos) << log;
  int status;
  ::waitpid(pid.value(), &status, 0);
}

// What the user cannot remove from their own run directory (here a directory of root's in it; a
// FUSE mount or a directory refilled while it is emptied fail the same way) is named, and the
// node goes on.
TEST_F(CleanupTest, WhatTheUserCannotRemoveIsNamedNotFatal) {
  const std::string run = UserDir(RunDir(req_.config, req_.id));
  UserDir(LocalDir(req_.config, req_.id));
  const std::string stuck = run + "/stuck";
  ASSERT_EQ(::mkdir(stuck.c_str(), 0755), 0);
  UniqueFD(::open((stuck + "/f").c_str(), O_WRONLY | O_CREAT, 0600));
  UniqueFD(::open((run + "/table").c_str(), O_WRONLY | O_CREAT, 0600));
  Status st = CleanJobOnNode(req_, Log());
  EXPECT_TRUE(st.ok()) << st.ToString();
  const std::string log = Logged();
  EXPECT_NE(log.find("error: left " + run), std::string::npos) << log;
  EXPECT_NE(log.find("could not be cleaned up completely on n1 (the node goes on"),
            std::string::npos)
      << log;
  EXPECT_FALSE(Exists(run + "/table"));                  // the rest went
  EXPECT_FALSE(Exists(LocalDir(req_.config, req_.id)));  // and the local directory
}

// More files than the time allows: the cleanup as the user is stopped, and the node goes on.
TEST_F(CleanupTest, MoreFilesThanTheTimeAllowsIsNotFatal) {
  const std::string local = UserDir(LocalDir(req_.config, req_.id));
  for (int d = 0; d < 20; d++) {
    const std::string dir = local + "/d" + std::to_string(d);
    UserDir(dir);
    for (int i = 0; i < 100; i++)
      UniqueFD(::open((dir + "/f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT, 0600));
  }
  req_.user_timeout_ms = 1;
  Status st = CleanJobOnNode(req_, Log());
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(Logged().find("ended before it was done (killed, or stopped after 0 s)"),
            std::string::npos)
      << Logged();
}

// Review of issue 30's fix: with local_dir=/tmp/%u, another user who makes /tmp/USER first
// would make every job of that user fail on the node. The prolog moves it aside, as anything
// planted, and puts the user's own in its place.
TEST_F(CleanupTest, ADirectoryOfTheUsersNameMadeByAnotherIsMovedAside) {
  req_.config.local_dir = base_ + "/local/%u";
  req_.prolog = true;
  req_.dataset = true;
  const std::string planted = base_ + "/local/u";
  ASSERT_EQ(::mkdir(planted.c_str(), 0777), 0);
  ASSERT_EQ(::chown(planted.c_str(), kUser + 1, kUser + 1), 0);
  ASSERT_EQ(::chmod(planted.c_str(), 0777), 0);
  Status st = CleanJobOnNode(req_, Log());
  EXPECT_TRUE(st.ok()) << st.ToString();
  struct stat own;  // the agent makes the job's directory in it, as in any directory of hers
  ASSERT_EQ(::lstat(planted.c_str(), &own), 0);
  EXPECT_EQ(own.st_uid, kUser);  // the user's own now
  EXPECT_EQ(own.st_mode & 07777, 0700u);
  EXPECT_NE(Logged().find("moved aside " + planted + ".planted-"), std::string::npos) << Logged();
  EXPECT_EQ(Logged().find("belongs to uid"), std::string::npos) << Logged();
}

}  // namespace
}  // namespace fanstore::spank
