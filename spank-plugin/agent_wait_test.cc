// Unit tests of the wait for this node's agent: ready, failed, vanished, untrusted, helper gone,
// timeout.
#include "spank-plugin/agent_wait.h"

#include "common/run_dir.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace fanstore::spank {
namespace {

class AgentWaitTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"wait-test"};
  void SetUp() override {
    root_ = tmp_.path();
    req_.run_dir = root_ + "/run";
    req_.node = "node7";
    req_.uid = ::getuid();
    req_.job = 5;
    req_.timeout_s = 10;
  }
  void TearDown() override {
    if (writer_.joinable()) writer_.join();
  }
  // As the agent does: the directory, and its liveness lock held (common/run_dir.h).
  void MakeRunDir(mode_t mode = 0700, bool alive = true) {
    ::mkdir(req_.run_dir.c_str(), mode);
    ::chmod(req_.run_dir.c_str(), mode);
    if (alive) {
      auto held = run_dir::HoldAlive(req_.run_dir);
      if (held.ok()) alive_ = std::move(held).value();
    }
  }
  void WriteStatus(const std::string& json) {
    std::ofstream(req_.run_dir + "/status.json.tmp") << json;
    ::rename((req_.run_dir + "/status.json.tmp").c_str(), (req_.run_dir + "/status.json").c_str());
  }
  // Runs fn after `ms` on another thread, as an agent would.
  void Later(int ms, std::function<void()> fn) {
    writer_ = std::thread([ms, fn] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      fn();
    });
  }

  std::string root_;
  WaitRequest req_;
  std::thread writer_;
  UniqueFD alive_;
};

TEST_F(AgentWaitTest, AnAgentThatDiedWhileStagingFailsTheWaitAtOnce) {
  MakeRunDir(0700, /*alive=*/false);  // status.json says staging, but no agent holds the directory
  WriteStatus(R"({"state":"staging"})");
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("died during stage-in"), std::string::npos) << s.ToString();
  EXPECT_LT(waited, 2.0);
}

TEST_F(AgentWaitTest, AnAgentThatDiedWhileStagingIsQuotedFromTheLaunchLog) {
  MakeRunDir(0700, /*alive=*/false);
  WriteStatus(R"({"state":"staging"})");
  req_.launch_log = root_ + "/launch.log";
  auto pid = Spawn({"/bin/sh", "-c", "echo '0: fanstore-agent[node7]: error: disk full'; exit 1"},
                   {}, nullptr, req_.launch_log);
  ASSERT_TRUE(pid.ok());
  req_.helper = pid.value();
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  EXPECT_NE(s.message().find("died during stage-in"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("error: disk full"), std::string::npos) << s.message();
}

TEST_F(AgentWaitTest, ReadyAfterStaging) {
  MakeRunDir();
  WriteStatus(R"({"state":"staging"})");
  Later(200, [this] { WriteStatus(R"({"state": "ready", "error": ""})"); });
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GE(waited, 0.15);
  EXPECT_LT(waited, 2.0);
}

TEST_F(AgentWaitTest, WaitsForTheRunDirectoryToAppear) {
  Later(150, [this] {
    MakeRunDir();
    WriteStatus(R"({"state":"ready"})");
  });
  double waited = 0;
  EXPECT_TRUE(WaitForAgent(req_, &waited).ok());
}

TEST_F(AgentWaitTest, FailedCarriesTheAgentsMessage) {
  MakeRunDir();
  WriteStatus(R"({"state":"failed","error":"shard-00001.fsd: hash mismatch"})");
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("node7 failed: shard-00001.fsd: hash mismatch"), std::string::npos)
      << s.message();
}

TEST_F(AgentWaitTest, RunDirectoryThatDisappearsMeansTheAgentEnded) {
  MakeRunDir();
  WriteStatus(R"({"state":"staging"})");
  Later(150, [this] { (void)RemoveTree(req_.run_dir); });
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exited before it was ready"), std::string::npos) << s.message();
}

TEST_F(AgentWaitTest, RefusesARunDirectoryOthersCanEnter) {
  MakeRunDir(0755);
  WriteStatus(R"({"state":"ready"})");
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a private directory"), std::string::npos) << s.message();
}

TEST_F(AgentWaitTest, RefusesASymlink) {
  MakeRunDir();
  WriteStatus(R"({"state":"ready"})");
  req_.run_dir = root_ + "/link";
  ASSERT_EQ(::symlink((root_ + "/run").c_str(), req_.run_dir.c_str()), 0);
  double waited = 0;
  EXPECT_FALSE(WaitForAgent(req_, &waited).ok());
}

TEST_F(AgentWaitTest, HelperThatEndsFirstIsReportedWithItsOutput) {
  req_.launch_log = root_ + "/launch.log";
  auto pid = Spawn({"/bin/sh", "-c", "echo 'srun: error: Unable to create step'; exit 1"}, {},
                   nullptr, req_.launch_log);
  ASSERT_TRUE(pid.ok());
  req_.helper = pid.value();
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exited with status 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Unable to create step"), std::string::npos) << s.message();
}

TEST_F(AgentWaitTest, VanishedRunDirectoryQuotesTheAgentsErrors) {
  MakeRunDir();
  WriteStatus(R"({"state":"staging"})");
  req_.launch_log = root_ + "/launch.log";
  auto pid = Spawn({"/bin/sh", "-c",
                    "echo '0: staging'; echo '1: fanstore-agent[node2]: error: shard-00000.fsd: "
                    "checksum mismatch'; "
                    "echo '0: more'; sleep 0.3; exit 1"},
                   {}, nullptr, req_.launch_log);
  ASSERT_TRUE(pid.ok());
  req_.helper = pid.value();
  // All at once, as a rename: a tree half removed could read as an agent that died (below).
  Later(100, [this] {
    const std::string gone = root_ + "/gone";
    ASSERT_EQ(::rename(req_.run_dir.c_str(), gone.c_str()), 0);
    (void)RemoveTree(gone);
  });
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exited before it was ready"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1: fanstore-agent[node2]: error: shard-00000.fsd: checksum mismatch"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("0: more"), std::string::npos) << s.message();
}

TEST_F(AgentWaitTest, TimesOut) {
  MakeRunDir();
  WriteStatus(R"({"state":"staging"})");
  req_.timeout_s = 1;
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not ready after"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("still staging"), std::string::npos) << s.message();
  EXPECT_GE(waited, 1.0);
}

// An agent held in the exchange (a fence that never completes) is said to be there, not staging.
TEST_F(AgentWaitTest, TimesOutInTheExchange) {
  MakeRunDir();
  WriteStatus(R"({"state":"staging","exchange_waiting_seconds":95.5})");
  req_.timeout_s = 1;
  double waited = 0;
  Status s = WaitForAgent(req_, &waited);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("in the metadata exchange with the other nodes' agents for 95.5 s"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("PMIx fence"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("submitted again"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("still staging"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fanstore::spank
