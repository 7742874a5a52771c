// Lazy unpack on real shard copies: files unpacked on demand and by the background pass come
// out once each with the packed bytes, and a damaged copy fails without leaving a partial file.
#include "agent/unpack.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "agent/testing.h"
#include "common/table.h"
#include "common/testing/threads.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

using std::chrono::steady_clock;
using testing::Dataset;

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

class UnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_.Make();
    copy_dir_ = ds_.tmp() + "/shards";
    data_root_ = ds_.tmp() + "/data";
    ASSERT_EQ(::mkdir(copy_dir_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(data_root_.c_str(), 0700), 0);
    data_root_fd_.Reset(::open(data_root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(data_root_fd_.valid());
    // As the agent does in lazy mode: the shards copied as they are, then unpacked from there.
    stage::Stats ss;
    Status st = stage::CopyShards(ds_.dir(), ds_.manifest(), ds_.dict(), ds_.AllShards(), copy_dir_,
                                  stage::Options{}, &ss);
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto shards = stage::OpenShards(ds_.dir(), ds_.manifest(), ds_.AllShards());
    ASSERT_TRUE(shards.ok()) << shards.status().ToString();
    st = stage::MakeParentDirs(data_root_fd_.get(), data_root_, *shards);
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = stage::UseCopies(*shards, copy_dir_);
    ASSERT_TRUE(st.ok()) << st.ToString();

    Unpacker::Context ctx;
    ctx.index = &ds_.index();
    ctx.dict = &ds_.dict();
    ctx.manifest = &ds_.manifest();
    ctx.data_root_fd = data_root_fd_.get();
    ctx.data_root = data_root_;
    ctx.copy_dir = copy_dir_;
    ctx.threads = 2;
    ctx.on_file = [this](uint32_t table_entry, uint64_t bytes) {
      std::lock_guard<std::mutex> l(mu_);
      calls_[table_entry].push_back(bytes);
    };
    ctx.on_done = [this] { done_calls_++; };
    unpacker_.Init(std::move(ctx), ds_.AllShards());
    for (uint32_t s = 0; s < ds_.nshards(); s++) total_files_ += ds_.Files(s).size();
    for (auto& sh : *shards) unpacker_.Adopt(std::move(sh));
  }
  void TearDown() override {
    unpacker_.Stop();
    ::unsetenv("FANSTORE_TEST_UNPACK_DELAY_MS");
  }

  // Each call names its file by its table entry.
  uint32_t TableEntry(uint32_t s, uint32_t i) const { return ds_.index().TableEntry(s, i); }
  std::string StagedPath(uint32_t s, uint32_t i) const {
    return data_root_ + "/" + ds_.Entry(s, i).path;
  }
  std::string Staged(uint32_t s, uint32_t i) const {
    return format::testing::ReadFile(StagedPath(s, i));
  }
  std::vector<uint64_t> CallsFor(uint32_t s, uint32_t i) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = calls_.find(TableEntry(s, i));
    return it == calls_.end() ? std::vector<uint64_t>{} : it->second;
  }
  size_t TotalCalls() {
    std::lock_guard<std::mutex> l(mu_);
    size_t n = 0;
    for (const auto& [entry, sizes] : calls_) n += sizes.size();
    return n;
  }
  bool WaitDone(std::chrono::milliseconds limit) {
    for (auto t0 = steady_clock::now(); steady_clock::now() - t0 < limit;) {
      if (unpacker_.done()) return true;
      ::usleep(5000);
    }
    return unpacker_.done();
  }

  Dataset ds_;
  std::string copy_dir_, data_root_;
  UniqueFD data_root_fd_;
  std::mutex mu_;
  std::map<uint32_t, std::vector<uint64_t>> calls_;  // on_file's sizes by table entry
  std::atomic<int> done_calls_{0};
  size_t total_files_ = 0;
  Unpacker unpacker_;  // last: stopped before the members its thread uses go
};

TEST_F(UnpackTest, EnsureUnpackedWritesTheFileOnceAndReportsIt) {
  const uint32_t s = 1, i = ds_.Files(s)[0];
  const auto& e = ds_.Entry(s, i);
  EXPECT_FALSE(Exists(StagedPath(s, i)));
  Status st = unpacker_.EnsureUnpacked(s, i);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Staged(s, i), ds_.Bytes(e.path));
  EXPECT_EQ(CallsFor(s, i), std::vector<uint64_t>{e.size});
  EXPECT_EQ(unpacker_.on_demand(), 1u);
  // Already out: nothing is unpacked or reported again.
  ASSERT_TRUE(unpacker_.EnsureUnpacked(s, i).ok());
  EXPECT_EQ(CallsFor(s, i).size(), 1u);
  EXPECT_EQ(unpacker_.on_demand(), 1u);
  EXPECT_EQ(TotalCalls(), 1u);
  EXPECT_FALSE(unpacker_.done());
}

TEST_F(UnpackTest, ConcurrentOpenersOfOneFileUnpackItOnce) {
  const uint32_t s = 2, i = ds_.Files(s).back();
  constexpr int kThreads = 16;
  std::atomic<int> failed{0};
  test::RunTogether(kThreads, [&](int) {
    if (!unpacker_.EnsureUnpacked(s, i).ok()) failed++;
  });
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(CallsFor(s, i).size(), 1u);
  EXPECT_EQ(unpacker_.on_demand(), 1u);
  EXPECT_EQ(Staged(s, i), ds_.Bytes(ds_.Entry(s, i).path));
}

TEST_F(UnpackTest, BackgroundPassUnpacksEverythingThenRemovesTheCopies) {
  // A file opened before the pass is not unpacked or reported a second time.
  const uint32_t s0 = 0, i0 = ds_.Files(s0)[1];
  ASSERT_TRUE(unpacker_.EnsureUnpacked(s0, i0).ok());
  unpacker_.Start();
  ASSERT_TRUE(WaitDone(std::chrono::seconds(5)));
  unpacker_.Stop();
  EXPECT_EQ(done_calls_, 1);
  EXPECT_EQ(unpacker_.on_demand(), 1u);
  EXPECT_GT(unpacker_.seconds(), 0);
  size_t files = 0;
  for (uint32_t s = 0; s < ds_.nshards(); s++)
    for (uint32_t i : ds_.Files(s)) {
      const auto& e = ds_.Entry(s, i);
      EXPECT_EQ(Staged(s, i), ds_.Bytes(e.path)) << e.path;
      EXPECT_EQ(CallsFor(s, i), std::vector<uint64_t>{e.size}) << e.path;
      files++;
    }
  EXPECT_EQ(files, ds_.files().size());
  EXPECT_EQ(TotalCalls(), files);
  EXPECT_EQ(total_files_, files);
  for (uint32_t s = 0; s < ds_.nshards(); s++)
    EXPECT_FALSE(Exists(copy_dir_ + "/" + table::CopyName(s)));
  EXPECT_FALSE(Exists(copy_dir_));
  // Once done, opens find the file in place.
  ASSERT_TRUE(unpacker_.EnsureUnpacked(s0, i0).ok());
  EXPECT_EQ(unpacker_.on_demand(), 1u);
}

TEST_F(UnpackTest, StopDuringThePassReturnsPromptly) {
  ::setenv("FANSTORE_TEST_UNPACK_DELAY_MS", "10000", 1);  // the pass waits before its first file
  unpacker_.Start();
  ::usleep(50000);
  const auto t0 = steady_clock::now();
  unpacker_.Stop();
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(5));  // not the pass's 10 s wait
  EXPECT_FALSE(unpacker_.done());
  EXPECT_EQ(done_calls_, 0);
  EXPECT_EQ(TotalCalls(), 0u);
  EXPECT_TRUE(Exists(copy_dir_));  // left for the agent's shutdown to remove
  unpacker_.Stop();                // twice is fine
}

TEST_F(UnpackTest, DamagedCopyFailsWithoutPartialFile) {
  const uint32_t s = 1;
  ASSERT_GE(ds_.Files(s).size(), 3u);
  const uint32_t i = ds_.Files(s)[2];
  const auto& e = ds_.Entry(s, i);
  testing::DamageFrame(copy_dir_ + "/" + table::CopyName(s), e);
  for (int attempt = 0; attempt < 2; attempt++) {  // a failed file stays packed: retried, fails
    Status st = unpacker_.EnsureUnpacked(s, i);
    ASSERT_FALSE(st.ok()) << "attempt " << attempt;
    EXPECT_NE(st.ToString().find(e.path), std::string::npos) << st.ToString();
    EXPECT_FALSE(Exists(StagedPath(s, i)));
  }
  EXPECT_TRUE(CallsFor(s, i).empty());
  EXPECT_EQ(unpacker_.on_demand(), 0u);
  // The other files of the shard are not affected.
  const uint32_t j = ds_.Files(s)[0];
  ASSERT_TRUE(unpacker_.EnsureUnpacked(s, j).ok());
  EXPECT_EQ(Staged(s, j), ds_.Bytes(ds_.Entry(s, j).path));
}

}  // namespace
}  // namespace fanstore::agent
