#include "output/drainer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/hash.h"
#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::output {
namespace {

using namespace std::chrono_literals;

class DrainerTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"drainer-test"};
  std::string local_, pfs_;
  void SetUp() override {
    local_ = tmp_.path() + "/out";
    pfs_ = tmp_.path() + "/pfs/run42";
    ASSERT_EQ(::mkdir(local_.c_str(), 0700), 0);
  }
  DrainerOptions Options(const std::string& node = "n1") {
    DrainerOptions o;
    o.local = local_;
    o.target = pfs_;
    o.node = node;
    o.umask = 022;
    o.settle_ms = 50;
    o.retry_ms = 50;
    o.retry_max_ms = 200;
    return o;
  }
  static void Write(const std::string& path, const std::string& data) {
    UniqueFD fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE(WriteFull(fd.get(), data.data(), data.size(), path).ok());
  }
  static std::string Read(const std::string& path) {
    auto r = ReadSmallFile(path, 64 << 20);
    return r.ok() ? r.value() : "<missing>";
  }
  // Waits for `done`, the drain's own progress: no time is assumed, only bounded.
  static bool Eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 3000; i++) {
      if (done()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return done();
  }
  static nlohmann::json Manifest(const std::string& dir) {
    return nlohmann::json::parse(Read(dir + "/" + kManifestName), nullptr, false);
  }
};

TEST_F(DrainerTest, DrainsClosedAndRenamedFilesOnlyUnderTheirFinalNames) {
  Write(local_ + "/before.txt", "there before the start");
  Drainer d;
  ASSERT_TRUE(d.Start(Options()).ok());
  Write(local_ + "/log.txt", "epoch 1\n");
  // torch.save to a temporary name, then os.replace: only the final name is copied.
  std::string ckpt(5 << 20, 'c');
  Write(local_ + "/ckpt.pt.tmp", ckpt);
  ASSERT_EQ(::rename((local_ + "/ckpt.pt.tmp").c_str(), (local_ + "/ckpt.pt").c_str()), 0);
  ASSERT_EQ(::mkdir((local_ + "/sub").c_str(), 0700), 0);
  Write(local_ + "/sub/metrics.json", "{}");
  EXPECT_TRUE(Eventually([&] { return d.Stats().files_drained == 4; })) << d.Stats().files_drained;
  EXPECT_EQ(Read(pfs_ + "/before.txt"), "there before the start");
  EXPECT_EQ(Read(pfs_ + "/log.txt"), "epoch 1\n");
  EXPECT_EQ(Read(pfs_ + "/ckpt.pt"), ckpt);
  EXPECT_EQ(Read(pfs_ + "/sub/metrics.json"), "{}");
  EXPECT_EQ(Read(pfs_ + "/ckpt.pt.tmp"), "<missing>");
  // Rewritten: drained again, the last version wins.
  Write(local_ + "/log.txt", "epoch 1\nepoch 2\n");
  EXPECT_TRUE(Eventually([&] { return Read(pfs_ + "/log.txt") == "epoch 1\nepoch 2\n"; }));
  DrainReport r = d.Finish(std::chrono::steady_clock::now() + 30s);
  EXPECT_TRUE(r.not_drained.empty());
  EXPECT_EQ(r.manifest_error, "");
  nlohmann::json m = Manifest(pfs_);
  ASSERT_TRUE(m.is_object()) << Read(pfs_ + "/" + kManifestName);
  EXPECT_EQ(m["files"]["ckpt.pt"]["size"], ckpt.size());
  EXPECT_EQ(m["files"]["ckpt.pt"]["xxh3"], HashHex(Xxh3(ckpt)));
  EXPECT_EQ(m["files"]["ckpt.pt"]["node"], "n1");
  EXPECT_EQ(m["files"]["log.txt"]["size"], 16);
  EXPECT_TRUE(m["not_drained"].empty());
  struct stat st;
  ASSERT_EQ(::stat((pfs_ + "/ckpt.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);  // the user's umask
}

// The parallel file system unreachable for a while: retried with a backoff, the status says
// why, and once it is back everything drains.
TEST_F(DrainerTest, AnUnreachableTargetIsRetriedAndReported) {
  const std::string pfs_root = tmp_.path() + "/pfs";
  Write(pfs_root, "not a directory yet");  // so nothing can be made below it
  Drainer d;
  ASSERT_TRUE(d.Start(Options()).ok());
  Write(local_ + "/a", "aaa");
  EXPECT_TRUE(Eventually([&] { return d.Stats().retries >= 2; }));
  DrainStats s = d.Stats();
  EXPECT_EQ(s.files_failed, 1u);
  EXPECT_EQ(s.files_pending, 1u);
  EXPECT_EQ(s.bytes_pending, 3u);
  EXPECT_NE(s.last_error.find("Not a directory"), std::string::npos) << s.last_error;
  ASSERT_EQ(::unlink(pfs_root.c_str()), 0);
  EXPECT_TRUE(Eventually([&] { return Read(pfs_ + "/a") == "aaa"; }));
  EXPECT_TRUE(d.Finish(std::chrono::steady_clock::now() + 30s).not_drained.empty());
}

// Still unreachable at the deadline: every file is reported by name, with why.
TEST_F(DrainerTest, WhatDidNotDrainByTheDeadlineIsNamed) {
  Write(tmp_.path() + "/pfs", "not a directory");
  Drainer d;
  ASSERT_TRUE(d.Start(Options()).ok());
  Write(local_ + "/a", "aaa");
  Write(local_ + "/b", "bbb");
  UniqueFD open_for_writing(::open((local_ + "/c").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  DrainReport r = d.Finish(std::chrono::steady_clock::now() + 1s);
  ASSERT_EQ(r.not_drained.size(), 3u) << ::testing::PrintToString(r.not_drained);
  EXPECT_NE(r.not_drained["a"].find("Not a directory"), std::string::npos) << r.not_drained["a"];
  EXPECT_NE(r.not_drained["b"].find("Not a directory"), std::string::npos);
  EXPECT_NE(r.not_drained["c"].find("open for writing"), std::string::npos) << r.not_drained["c"];
  EXPECT_NE(r.manifest_error, "");
}

// While the job reads, each piece of a copy is followed by a pause; while it does not, none.
TEST_F(DrainerTest, TheDrainYieldsWhileTheJobReads) {
  std::atomic<uint64_t> reads{0};
  DrainerOptions o = Options();
  o.activity = [&] { return reads.fetch_add(1); };  // reading all the time
  Drainer d;
  ASSERT_TRUE(d.Start(o).ok());
  Write(local_ + "/busy", std::string(4 << 20, 'b'));
  EXPECT_TRUE(Eventually([&] { return Read(pfs_ + "/busy").size() == (4u << 20); }));
  EXPECT_GT(d.Stats().yielded_seconds, 0.0);
  EXPECT_TRUE(d.Finish(std::chrono::steady_clock::now() + 30s).not_drained.empty());

  o.activity = [] { return uint64_t{7}; };  // a job that does not read
  Drainer idle;
  ASSERT_TRUE(idle.Start(o).ok());
  Write(local_ + "/idle", std::string(4 << 20, 'i'));
  EXPECT_TRUE(Eventually([&] { return Read(pfs_ + "/idle").size() == (4u << 20); }));
  EXPECT_EQ(idle.Stats().yielded_seconds, 0.0);
}

// Two nodes write the same relative path: the first keeps the name, the second's copy goes
// beside it; the manifest holds both, and each node's entries.
TEST_F(DrainerTest, TwoNodesWritingOneNameKeepBoth) {
  const std::string other = tmp_.path() + "/out2";
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  Write(local_ + "/log.txt", "from n1");
  Write(other + "/log.txt", "from n2");
  Drainer first;
  ASSERT_TRUE(first.Start(Options("n1")).ok());
  EXPECT_TRUE(Eventually([&] { return first.Stats().files_drained == 1; }));
  DrainerOptions o2 = Options("n2");
  o2.local = other;
  Drainer second;
  ASSERT_TRUE(second.Start(o2).ok());
  EXPECT_TRUE(Eventually([&] { return second.Stats().files_drained == 1; }));
  EXPECT_TRUE(first.Finish(std::chrono::steady_clock::now() + 30s).not_drained.empty());
  EXPECT_TRUE(second.Finish(std::chrono::steady_clock::now() + 30s).not_drained.empty());
  EXPECT_EQ(Read(pfs_ + "/log.txt"), "from n1");
  EXPECT_EQ(Read(pfs_ + "/log.txt.node-n2"), "from n2");
  nlohmann::json m = Manifest(pfs_);
  EXPECT_EQ(m["files"]["log.txt"]["node"], "n1");
  EXPECT_EQ(m["files"]["log.txt.node-n2"]["node"], "n2");
  EXPECT_EQ(m["files"]["log.txt.node-n2"]["source"], "log.txt");
}

}  // namespace
}  // namespace fanstore::output
