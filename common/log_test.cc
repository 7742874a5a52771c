#include "common/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "common/unique_fd.h"

namespace fanstore::log {
namespace {

// Sends stderr to a temporary file for the life of the object; Take() returns what was written.
class StderrCapture {
 public:
  StderrCapture() {
    char tmpl[] = "/tmp/fanstore-log-test-XXXXXX";
    file_.Reset(::mkstemp(tmpl));
    ::unlink(tmpl);
    saved_.Reset(::dup(STDERR_FILENO));
    ::dup2(file_.get(), STDERR_FILENO);
  }
  ~StderrCapture() { ::dup2(saved_.get(), STDERR_FILENO); }
  std::string Take() {
    std::string out;
    char buf[4096];
    ssize_t n;
    for (off_t off = 0; (n = ::pread(file_.get(), buf, sizeof buf, off)) > 0; off += n)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  UniqueFD file_, saved_;
};

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { SetTag("fanstore"); }
  void TearDown() override {
    SetLevel(kInfo);
    SetTag("fanstore");
  }
};

TEST_F(LogTest, InfoIsTaggedAndOtherLevelsAreNamed) {
  SetLevel(kInfo);
  SetTag("fanstore-agent[node1]");
  StderrCapture cap;
  LOG_INFO("ready in %d s", 3);
  LOG_WARN("slow %s", "disk");
  LOG_ERROR("failed");
  EXPECT_EQ(cap.Take(),
            "fanstore-agent[node1]: ready in 3 s\n"
            "fanstore-agent[node1]: warn: slow disk\n"
            "fanstore-agent[node1]: error: failed\n");
}

TEST_F(LogTest, LinesBelowTheLevelAreNeitherWrittenNorFormatted) {
  SetLevel(kWarn);
  EXPECT_EQ(GetLevel(), kWarn);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  StderrCapture cap;
  LOG_INFO("%d", count());
  LOG_DEBUG("%d", count());
  LOG_WARN("%d", count());
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(cap.Take(), "fanstore: warn: 1\n");
}

TEST_F(LogTest, DebugLevelAddsFileAndLine) {
  SetLevel(kDebug);
  StderrCapture cap;
  const int line = __LINE__ + 1;
  LOG_DEBUG("x=%d", 5);
  EXPECT_EQ(cap.Take(), "fanstore: debug: log_test.cc:" + std::to_string(line) + ": x=5\n");
}

TEST_F(LogTest, ALongMessageIsCutToOneLine) {
  SetLevel(kInfo);
  StderrCapture cap;
  const std::string huge(10000, 'z');
  LOG_INFO("%s", huge.c_str());
  LOG_INFO("next");
  const std::string out = cap.Take();
  const size_t nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos);
  EXPECT_LT(nl, 2048u);
  EXPECT_GT(nl, 2000u);
  EXPECT_EQ(out.substr(0, 10), "fanstore: ");
  EXPECT_EQ(out.substr(nl + 1), "fanstore: next\n");
}

TEST_F(LogTest, ALongTagIsCut) {
  SetLevel(kInfo);
  SetTag(std::string(500, 't').c_str());
  StderrCapture cap;
  LOG_INFO("m");
  EXPECT_EQ(cap.Take(), std::string(127, 't') + ": m\n");
}

}  // namespace
}  // namespace fanstore::log
