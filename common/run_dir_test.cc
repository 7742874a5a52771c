#include "common/run_dir.h"
#include "common/testing/temp_dir.h"

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
  test::TempDir tmp_{"rundir-test"};
  void SetUp() override { dir_ = tmp_.path(); }
  void WriteStatus(const std::string& json) {
    UniqueFD fd(::open((dir_ + "/" + kStatusName).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
    ASSERT_EQ(::write(fd.get(), json.data(), json.size()), static_cast<ssize_t>(json.size()));
  }
  std::string dir_;
};

TEST_F(RunDirTest, ADeadAgentIsNeverReady) {
  WriteStatus(R"({"mount":"/fanstore/x","pid":1,"state":"ready"})");
  EXPECT_FALSE(AgentAlive(dir_));
  auto st = ReadStatus(dir_);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, AgentState::kReady);  // what the file says...
  EXPECT_TRUE(st->Dead());                   // ...but nobody holds the directory: the file lies
  {
    auto held = HoldAlive(dir_);
    ASSERT_TRUE(held.ok());
    EXPECT_TRUE(AgentAlive(dir_));
    st = ReadStatus(dir_);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->state, AgentState::kReady);
    EXPECT_TRUE(st->alive);
    EXPECT_FALSE(st->Dead());
    EXPECT_FALSE(HoldAlive(dir_).ok());  // one agent per directory
  }
  EXPECT_TRUE(ReadStatus(dir_)->Dead());
  WriteStatus(R"({"error":"no space","state":"failed"})");
  st = ReadStatus(dir_);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, AgentState::kFailed);
  EXPECT_EQ(st->error, "no space");
  EXPECT_FALSE(st->Dead());  // a final state needs no agent
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
  auto st = ReadStatus(dir_);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, AgentState::kStaging);
  EXPECT_FALSE(st->Dead());
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  st = ReadStatus(dir_);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, AgentState::kStaging);
  EXPECT_TRUE(st->Dead());
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(RunDirTest, NoStatusFileIsNotFound) {
  auto st = ReadStatus(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), Status::Code::kNotFound);
}

TEST_F(RunDirTest, EveryStateTheAgentWrites) {
  const std::pair<const char*, AgentState> states[] = {{"starting", AgentState::kStarting},
                                                       {"staging", AgentState::kStaging},
                                                       {"ready", AgentState::kReady},
                                                       {"failed", AgentState::kFailed}};
  for (const auto& [word, state] : states) {
    // The agent's own layout: keys sorted, no spaces, other fields around the state.
    WriteStatus(std::string(R"({"mount":"/m","node":"n1","pid":7,"shards":[0,3],"state":")") +
                word + R"(","unpacked":false})" + "\n");
    auto st = ReadStatus(dir_);
    ASSERT_TRUE(st.ok()) << word << ": " << st.status().ToString();
    EXPECT_EQ(st->state, state) << word;
    // The one table both ways: what the agent writes is what readers parse.
    EXPECT_STREQ(StateName(state), word);
    EXPECT_EQ(ParseState(word), state) << word;
  }
  EXPECT_EQ(ReadStatus(dir_)->error, "the agent failed without a message");  // never empty
  for (const char* other : {"", "Ready", "ready ", "unknown"})
    EXPECT_EQ(ParseState(other), std::nullopt) << other;
}

TEST_F(RunDirTest, TheExchangeWaitIsReadWhenWellFormed) {
  WriteStatus(R"({"exchange_waiting_seconds":95.5,"state":"staging"})");
  EXPECT_DOUBLE_EQ(ReadStatus(dir_)->exchange_waiting_s, 95.5);
  for (const char* other :
       {R"({"state":"staging"})", R"({"exchange_waiting_seconds":-3,"state":"staging"})",
        R"({"exchange_waiting_seconds":"95","state":"staging"})"}) {
    WriteStatus(other);
    EXPECT_EQ(ReadStatus(dir_)->exchange_waiting_s, -1) << other;
  }
}

TEST_F(RunDirTest, TornOrForeignFilesAreCorrupt) {
  for (const char* bad : {"", "{", R"({"state":"rea)", "[]", "null", R"({"state":1})",
                          R"({"error":"x"})", "\x01\xff\xfe garbage", R"({"state":"dancing"})"}) {
    WriteStatus(bad);
    auto st = ReadStatus(dir_);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.status().code(), Status::Code::kCorruption) << bad;
  }
  WriteStatus(R"({"state":"dancing"})");
  EXPECT_NE(ReadStatus(dir_).status().ToString().find("unknown state \"dancing\""),
            std::string::npos);
}

}  // namespace
}  // namespace fanstore::run_dir
