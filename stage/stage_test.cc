// Stage-in from a packed dataset into a node-local directory: what is written where and with
// which modes, and the errors for missing, short and damaged shards.
#include "stage/stage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>

#include "common/table.h"
#include "common/thread_pool.h"
#include "format/dataset.h"
#include "format/testing.h"
#include "pack/pack.h"

namespace fanstore::stage {
namespace {

using format::testing::ReadFile;
using format::testing::WriteFile;

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class StageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = t_.path();
    src_ = base_ + "/src";
    ds_ = base_ + "/ds.fs";
    local_ = base_ + "/local";
    ::mkdir(src_.c_str(), 0755);
    ::mkdir((src_ + "/a").c_str(), 0755);
    ::mkdir((src_ + "/a/b").c_str(), 0755);
    ::mkdir((src_ + "/emptydir").c_str(), 0755);
    Add("top.txt", std::string(3000, 't'));
    Add("a/b/deep.bin", Random(40000, 1));
    Add("empty", "");
    for (int i = 0; i < 20; i++) Add("a/f" + std::to_string(i), Random(3000 + 500 * i, i + 2));
    ::symlink("a/b", (src_ + "/link").c_str());
    pack::Options o;
    o.sync = false;
    o.shard_size = 32 << 10;  // several shards
    ASSERT_TRUE(pack::Pack(src_, ds_, o, nullptr).ok());
    auto m = format::LoadManifest(ds_);
    ASSERT_TRUE(m.ok());
    m_ = std::move(m).value();
    ASSERT_GE(m_.shards.size(), 3u);
    ::mkdir(local_.c_str(), 0700);
  }
  void Add(const std::string& rel, const std::string& data) {
    WriteFile(src_ + "/" + rel, data);
    files_[rel] = data;
  }
  std::vector<uint32_t> AllIds() const {
    std::vector<uint32_t> ids;
    for (uint32_t i = 0; i < m_.shards.size(); i++) ids.push_back(i);
    return ids;
  }
  std::string ShardPath(uint32_t id) const { return ds_ + "/" + m_.shards[id].file; }
  // The path and frame offset of a non-empty file in shard `id`.
  std::pair<std::string, uint64_t> AFileIn(uint32_t id) {
    auto sh = format::OpenShard(ShardPath(id), m_.dataset_id);
    EXPECT_TRUE(sh.ok());
    for (const auto& e : (*sh)->entries)
      if (e.type == format::EntryType::kFile && e.stored_len > 0) return {e.path, e.offset};
    ADD_FAILURE() << "no file in shard " << id;
    return {};
  }
  void FlipByte(const std::string& path, uint64_t off) {
    UniqueFD fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    char c;
    ASSERT_EQ(::pread(fd.get(), &c, 1, off), 1);
    c ^= 0x10;
    ASSERT_EQ(::pwrite(fd.get(), &c, 1, off), 1);
  }
  Status StageAll(Stats* stats = nullptr, const Options& o = {}) {
    auto shards = OpenShards(ds_, m_, AllIds());
    if (!shards.ok()) return shards.status();
    return StageShards(m_, dict_, *shards, local_, o, stats);
  }

  format::testing::TempDir t_;
  std::string base_, src_, ds_, local_;
  std::map<std::string, std::string> files_;
  format::Manifest m_;
  format::Dictionary dict_;
};

TEST_F(StageTest, EveryFileIsStagedReadOnlyUnderPrivateDirectories) {
  ThreadPool pool(2);
  Options o;
  o.pool = &pool;
  Stats stats;
  Status s = StageAll(&stats, o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const auto& [rel, data] : files_) {
    const std::string p = local_ + "/" + rel;
    EXPECT_EQ(ReadFile(p), data) << rel;
    struct stat st;
    ASSERT_EQ(::lstat(p.c_str(), &st), 0) << rel;
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0400u) << rel;
  }
  struct stat st;
  for (const char* d : {"/a", "/a/b"}) {
    ASSERT_EQ(::lstat((local_ + d).c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << d;
  }
  // Only regular files are staged: no symlink, and no directory without a file in it.
  EXPECT_NE(::lstat((local_ + "/link").c_str(), &st), 0);
  EXPECT_NE(::lstat((local_ + "/emptydir").c_str(), &st), 0);
  EXPECT_EQ(stats.shards, m_.shards.size());
  EXPECT_EQ(stats.files, files_.size());
  uint64_t raw = 0, shard_bytes = 0;
  for (const auto& [rel, data] : files_) raw += data.size();
  for (const auto& ref : m_.shards) shard_bytes += ref.bytes;
  EXPECT_EQ(stats.raw_bytes, raw);
  EXPECT_EQ(stats.read_bytes, shard_bytes);
}

// on_file reports each file as it is staged: the agent's stage-in progress counts on it.
TEST_F(StageTest, OnFileCountsEveryFileAndItsBytes) {
  ThreadPool pool(2);
  std::atomic<uint64_t> files{0}, bytes{0};
  Options o;
  o.pool = &pool;
  o.on_file = [&](uint64_t n) {
    files++;
    bytes += n;
  };
  Stats stats;
  ASSERT_TRUE(StageAll(&stats, o).ok());
  EXPECT_EQ(files.load(), files_.size());
  EXPECT_EQ(files.load(), stats.files);
  EXPECT_EQ(bytes.load(), stats.raw_bytes);
}

TEST_F(StageTest, OnlyTheGivenShardsAreStaged) {
  auto shards = OpenShards(ds_, m_, {1});
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  ASSERT_EQ(shards->size(), 1u);
  ASSERT_TRUE(StageShards(m_, dict_, *shards, local_, {}, nullptr).ok());
  size_t staged = 0;
  for (const auto& e : (*shards)[0]->entries) {
    if (e.type != format::EntryType::kFile) continue;
    EXPECT_EQ(ReadFile(local_ + "/" + e.path), files_[e.path]);
    staged++;
  }
  EXPECT_GT(staged, 0u);
  const std::string other = AFileIn(0).first;
  EXPECT_NE(::access((local_ + "/" + other).c_str(), F_OK), 0) << other;
}

TEST_F(StageTest, ALargeFileIsStreamedToDisk) {
  const std::string big = Random(format::kStreamAbove + 12345, 77);
  WriteFile(src_ + "/big.bin", big);
  const std::string ds2 = base_ + "/big.fs";
  pack::Options po;
  po.sync = false;
  po.level = 0;
  ASSERT_TRUE(pack::Pack(src_, ds2, po, nullptr).ok());
  auto m = format::LoadManifest(ds2);
  ASSERT_TRUE(m.ok());
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < m->shards.size(); i++) ids.push_back(i);
  auto shards = OpenShards(ds2, *m, ids);
  ASSERT_TRUE(shards.ok());
  ThreadPool pool(2);
  Options o;
  o.pool = &pool;
  Status s = StageShards(*m, dict_, *shards, local_, o, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ReadFile(local_ + "/big.bin"), big);
}

TEST_F(StageTest, AnUnknownShardIdIsRefused) {
  auto shards = OpenShards(ds_, m_, {0, static_cast<uint32_t>(m_.shards.size())});
  EXPECT_EQ(shards.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(shards.status().message().find("no shard"), std::string::npos);
}

TEST_F(StageTest, AMissingShardIsNamed) {
  ASSERT_EQ(::unlink(ShardPath(1).c_str()), 0);
  Status s = StageAll();
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find("missing shard " + ShardPath(1)), std::string::npos) << s.ToString();
}

TEST_F(StageTest, AShortShardIsNamed) {
  ASSERT_EQ(::truncate(ShardPath(2).c_str(), m_.shards[2].bytes - 1), 0);
  Status s = StageAll();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(ShardPath(2)), std::string::npos) << s.ToString();
}

TEST_F(StageTest, ADamagedFrameNamesTheFileWhichIsNeverWritten) {
  auto [path, off] = AFileIn(1);
  FlipByte(ShardPath(1), off);
  Status s = StageAll();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(ShardPath(1)), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'" + path + "'"), std::string::npos) << s.ToString();
  // A small file is verified before it is created: bad bytes never reach local storage.
  EXPECT_NE(::access((local_ + "/" + path).c_str(), F_OK), 0) << path;
}

TEST_F(StageTest, AMissingLocalRootIsAnError) {
  local_ = base_ + "/nowhere";
  Status s = StageAll();
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find(local_), std::string::npos);
}

TEST_F(StageTest, ACancelledStageIsAborted) {
  std::atomic<bool> cancel{true};
  Options o;
  o.cancel = &cancel;
  Status s = StageAll(nullptr, o);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
}

TEST_F(StageTest, CreateStagedIsExclusiveAndNeverFollowsASymlink) {
  UniqueFD root(::open(local_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto fd = CreateStaged(root.get(), local_, "f");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  struct stat st;
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  auto again = CreateStaged(root.get(), local_, "f");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(local_ + "/f"), std::string::npos);
  const std::string victim = base_ + "/victim";
  WriteFile(victim, "keep");
  ASSERT_EQ(::symlink(victim.c_str(), (local_ + "/l").c_str()), 0);
  EXPECT_FALSE(CreateStaged(root.get(), local_, "l").ok());
  EXPECT_EQ(ReadFile(victim), "keep");
}

class CopyTest : public StageTest {
 protected:
  void SetUp() override {
    StageTest::SetUp();
    copies_ = base_ + "/copies";
    ::mkdir(copies_.c_str(), 0700);
  }
  std::string copies_;
};

TEST_F(CopyTest, CopiesAreByteForByteAndServeALaterStage) {
  Stats stats;
  Status s = CopyShards(ds_, m_, dict_, AllIds(), copies_, {}, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint64_t total = 0;
  for (uint32_t i = 0; i < m_.shards.size(); i++) {
    const std::string copy = copies_ + "/" + table::CopyName(i);
    EXPECT_EQ(ReadFile(copy), ReadFile(ShardPath(i)));
    struct stat st;
    ASSERT_EQ(::stat(copy.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    total += m_.shards[i].bytes;
  }
  EXPECT_EQ(stats.shards, m_.shards.size());
  EXPECT_EQ(stats.read_bytes, total);
  EXPECT_EQ(stats.raw_bytes, 0u);
  // Open in the dataset, unpack from the copies: the dataset's shards may be gone by then.
  auto shards = OpenShards(ds_, m_, AllIds());
  ASSERT_TRUE(shards.ok());
  ASSERT_TRUE(UseCopies(*shards, copies_).ok());
  for (uint32_t i = 0; i < m_.shards.size(); i++) ASSERT_EQ(::unlink(ShardPath(i).c_str()), 0);
  EXPECT_EQ((*shards)[0]->path, copies_ + "/" + table::CopyName(0));
  s = StageShards(m_, dict_, *shards, local_, {}, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const auto& [rel, data] : files_) EXPECT_EQ(ReadFile(local_ + "/" + rel), data) << rel;
}

TEST_F(CopyTest, ADamagedShardIsReportedByTheFileItBreaks) {
  auto [path, off] = AFileIn(2);
  FlipByte(ShardPath(2), off);
  Status s = CopyShards(ds_, m_, dict_, AllIds(), copies_, {}, nullptr);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(ShardPath(2)), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'" + path + "'"), std::string::npos) << s.ToString();
}

TEST_F(CopyTest, AShortShardOrAnUnknownIdIsRefused) {
  ASSERT_EQ(::truncate(ShardPath(0).c_str(), 100), 0);
  Status s = CopyShards(ds_, m_, dict_, {0}, copies_, {}, nullptr);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("differs from the manifest"), std::string::npos) << s.ToString();
  s = CopyShards(ds_, m_, dict_, {static_cast<uint32_t>(m_.shards.size())}, copies_, {}, nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

TEST_F(CopyTest, AnExistingCopyIsNeverOverwritten) {
  const std::string planted = copies_ + "/" + table::CopyName(0);
  WriteFile(planted, "planted");
  Status s = CopyShards(ds_, m_, dict_, {0}, copies_, {}, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(planted), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadFile(planted), "planted");
}

TEST_F(CopyTest, ACancelledCopyIsAborted) {
  std::atomic<bool> cancel{true};
  Options o;
  o.cancel = &cancel;
  Status s = CopyShards(ds_, m_, dict_, AllIds(), copies_, o, nullptr);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.ToString();
}

}  // namespace
}  // namespace fanstore::stage
