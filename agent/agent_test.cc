// The agent end to end in one process, bootstrap "single": it stages a real dataset, says
// ready in status.json, serves opens over its socket, counts them, and leaves nothing behind.
#include "agent/agent.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/testing.h"
#include "common/proto.h"
#include "common/run_dir.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

using testing::Ask;
using testing::Dataset;
using testing::ReadFd;

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// The names in `dir` (without . and ..).
std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (struct dirent* de = ::readdir(d))
    if (std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, "..")) out.push_back(de->d_name);
  ::closedir(d);
  return out;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_.Make();
    local_dir_ = ds_.tmp() + "/local";
    run_dir_ = ds_.tmp() + "/run";
  }
  void TearDown() override {
    if (agent_) agent_->Shutdown();
    ::unsetenv("FANSTORE_TEST_UNPACK_DELAY_MS");
  }

  void MakeAgent(const std::string& unpack, bool epilog_unmounts = false) {
    Config cfg;
    cfg.epilog_unmounts_local_dir = epilog_unmounts;
    cfg.dataset = ds_.dir();
    cfg.local_dir = local_dir_;
    cfg.run_dir = run_dir_;
    cfg.mount = "/fanstore-test";
    cfg.bootstrap = "single";
    cfg.node_name = "test-node";
    cfg.threads = 2;
    cfg.unpack = unpack;
    agent_ = std::make_unique<Agent>(std::move(cfg));
  }
  UniqueFD Client() {
    const std::string sock = run_dir_ + "/" + run_dir::kSocketName;
    UniqueFD c(proto::Connect(sock.c_str(), 5000));
    EXPECT_TRUE(c.valid()) << "connect " << sock;
    return c;
  }
  // Opens `path` through the agent: its content, or "errno N" when refused.
  std::string OpenThroughAgent(int sock, const std::string& path) {
    auto a = Ask(sock, proto::kOpen, path);
    if (a.rc != 0) return "transport " + std::to_string(a.rc);
    if (a.frame.status != 0) return "errno " + std::to_string(a.frame.status);
    if (a.fd < 0) return "no descriptor";
    UniqueFD fd(a.fd);
    return ReadFd(fd.get());
  }
  nlohmann::json Stats() { return nlohmann::json::parse(agent_->StatsJson()); }
  // Only what the test made itself is left in its directory.
  void ExpectNothingLeft() {
    auto names = List(ds_.tmp());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"ds.fs", "src"}));
  }

  Dataset ds_;
  std::string local_dir_, run_dir_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, ServesEveryFileAndCountsTheOpens) {
  MakeAgent("eager");
  Status st = agent_->Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto rs = run_dir::ReadStatus(run_dir_);
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  EXPECT_EQ(rs->state, run_dir::AgentState::kReady);
  EXPECT_TRUE(rs->alive);

  UniqueFD c = Client();
  for (const auto& [path, bytes] : ds_.files()) EXPECT_EQ(OpenThroughAgent(c.get(), path), bytes);
  const std::string enoent = "errno " + std::to_string(ENOENT);
  EXPECT_EQ(OpenThroughAgent(c.get(), "d0/missing"), enoent);
  EXPECT_EQ(OpenThroughAgent(c.get(), "d1"), enoent);    // a directory
  EXPECT_EQ(OpenThroughAgent(c.get(), "link"), enoent);  // a symlink: the client resolves it

  const nlohmann::json j = Stats();
  for (const char* key : {"opens", "bytes", "peers", "source_reads", "cache", "unpack", "prefetch"})
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << j.dump();
  EXPECT_EQ(j["opens"]["local"], ds_.files().size());
  EXPECT_EQ(j["opens"]["remote"], 0);
  EXPECT_EQ(j["opens"]["fallback"], 0);
  EXPECT_EQ(j["files_staged"], ds_.files().size());
  EXPECT_EQ(j["unpack"]["mode"], "eager");
  EXPECT_EQ(j["unpack"]["done"], true);
  EXPECT_EQ(j["size"], 1);
  // CPU seconds at ready, at the unpack's end (eager: the same) and now, in that order.
  const auto& cpu = j["cpu_seconds"];
  EXPECT_GT(cpu["ready"].get<double>(), 0);
  EXPECT_EQ(cpu["unpacked"], cpu["ready"]);
  EXPECT_GE(cpu["now"].get<double>(), cpu["ready"].get<double>());
  // The same counters over the socket, as `fanstore stats` reads them.
  auto a = Ask(c.get(), proto::kStats);
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(nlohmann::json::parse(a.payload)["opens"]["local"], ds_.files().size());
}

TEST_F(AgentTest, ShutdownRemovesWhatTheAgentCreated) {
  MakeAgent("eager");
  ASSERT_TRUE(agent_->Start().ok());
  ASSERT_TRUE(Exists(run_dir_ + "/" + run_dir::kSocketName));
  ASSERT_FALSE(List(local_dir_).empty());
  agent_->Shutdown();
  agent_.reset();
  EXPECT_FALSE(Exists(local_dir_));
  EXPECT_FALSE(Exists(run_dir_));
  ExpectNothingLeft();
}

TEST_F(AgentTest, ShutdownEmptiesGivenDirectoriesButKeepsThem) {
  ASSERT_EQ(::mkdir(local_dir_.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(run_dir_.c_str(), 0700), 0);
  MakeAgent("eager");
  ASSERT_TRUE(agent_->Start().ok());
  agent_->Shutdown();
  agent_.reset();
  EXPECT_TRUE(Exists(local_dir_));
  EXPECT_TRUE(Exists(run_dir_));
  EXPECT_EQ(List(local_dir_), std::vector<std::string>{});
  EXPECT_EQ(List(run_dir_), std::vector<std::string>{});
}

// --epilog-unmounts-local-dir: a local directory that is a mount point (the plugin's per-job
// tmpfs) keeps its files for the epilog's unmount; one that is not is emptied as ever.
TEST_F(AgentTest, ShutdownLeavesAMountedLocalDirToTheEpilog) {
  ASSERT_EQ(::mkdir(local_dir_.c_str(), 0700), 0);
  MakeAgent("eager", /*epilog_unmounts=*/true);
  ASSERT_TRUE(agent_->Start().ok());
  agent_->Shutdown();
  agent_.reset();
  EXPECT_EQ(List(local_dir_), std::vector<std::string>{}) << "not a mount point: emptied";
  if (::geteuid() != 0) GTEST_SKIP() << "the mounted case needs root";
  const pid_t pid = ::fork();
  if (pid == 0) {  // a mount namespace of its own: the tmpfs goes with the child
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        ::mount("jobfs", local_dir_.c_str(), "tmpfs", 0, "mode=0700") != 0)
      ::_exit(10);
    MakeAgent("eager", true);
    if (!agent_->Start().ok()) ::_exit(11);
    agent_->Shutdown();
    agent_.reset();
    ::_exit(List(local_dir_).empty() ? 12 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

TEST_F(AgentTest, LazyUnpackServesAFileBeforeTheBackgroundPass) {
  ::setenv("FANSTORE_TEST_UNPACK_DELAY_MS", "10000", 1);  // the pass waits: opens come first
  MakeAgent("lazy");
  Status st = agent_->Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  nlohmann::json j = Stats();
  EXPECT_EQ(j["unpack"]["mode"], "lazy");
  EXPECT_EQ(j["unpack"]["done"], false);
  EXPECT_EQ(j["unpack"]["on_demand"], 0);
  EXPECT_GT(j["cpu_seconds"]["ready"].get<double>(), 0);
  EXPECT_EQ(j["cpu_seconds"]["unpacked"], 0);  // not yet

  const std::string path = ds_.files().begin()->first;
  UniqueFD c = Client();
  EXPECT_EQ(OpenThroughAgent(c.get(), path), ds_.Bytes(path));
  EXPECT_EQ(OpenThroughAgent(c.get(), path), ds_.Bytes(path));  // unpacked once
  j = Stats();
  EXPECT_EQ(j["unpack"]["on_demand"], 1);
  EXPECT_EQ(j["opens"]["local"], 2);
  EXPECT_EQ(j["unpack"]["done"], false);

  // Shutdown stops the held-back pass at once and removes the copies with the rest.
  const auto t0 = std::chrono::steady_clock::now();
  agent_->Shutdown();
  agent_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // not its 10 s wait
  ExpectNothingLeft();
}

TEST_F(AgentTest, NonEmptyLocalDirFailsTheStart) {
  ASSERT_EQ(::mkdir(local_dir_.c_str(), 0700), 0);
  format::testing::WriteFile(local_dir_ + "/somebody-elses", "keep me");
  MakeAgent("eager");
  Status st = agent_->Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find(local_dir_), std::string::npos) << st.ToString();
  auto rs = run_dir::ReadStatus(run_dir_);
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  EXPECT_EQ(rs->state, run_dir::AgentState::kFailed);
  EXPECT_NE(rs->error.find(local_dir_), std::string::npos) << rs->error;
  EXPECT_NE(rs->error.find("not empty"), std::string::npos) << rs->error;
  // The agent's own files are gone (status.json stays for the launcher); what it found stays.
  EXPECT_EQ(List(run_dir_), std::vector<std::string>{run_dir::kStatusName});
  EXPECT_EQ(List(local_dir_), std::vector<std::string>{"somebody-elses"});
}

}  // namespace
}  // namespace fanstore::agent
