#include "common/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace fanstore::run_dir {
namespace {

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fanstore-rundir-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
  void WriteStatus(const std::string& json) {
    UniqueFD fd(::open((dir_ + "/" + kStatusName).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
    ASSERT_EQ(::write(fd.get(), json.data(), json.size()), static_cast<ssize_t>(json.size()));
  }
  std::string dir_;
};

TEST_F(RunDirTest, ADeadAgentIsNeverReady) {
  WriteStatus(R"({"mount":"/fanstore/x","pid":1,"state":"ready"})");
  EXPECT_FALSE(AgentAlive(dir_));
  EXPECT_EQ(State(dir_), "dead");  // nobody holds the directory: the file lies
  {
    auto held = HoldAlive(dir_);
    ASSERT_TRUE(held.ok());
    EXPECT_TRUE(AgentAlive(dir_));
    EXPECT_EQ(State(dir_), "ready");
    EXPECT_FALSE(HoldAlive(dir_).ok());  // one agent per directory
  }
  EXPECT_EQ(State(dir_), "dead");
  WriteStatus(R"({"error":"no space","state":"failed"})");
  EXPECT_EQ(State(dir_), "failed");  // a final state needs no agent
}

TEST_F(RunDirTest, AKilledHolderReleasesTheDirectory) {
  WriteStatus(R"({"state":"staging"})");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    auto held = HoldAlive(dir_);
    char c = held.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(State(dir_), "staging");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(State(dir_), "dead");
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(RunDirTest, NoStatusFileNoState) { EXPECT_EQ(State(dir_), ""); }

}  // namespace
}  // namespace fanstore::run_dir
