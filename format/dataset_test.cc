// Dataset::Open's whole-namespace checks, lookups, and the progress and destination rules of
// Verify and Extract. Round trips and damaged shards are in pack/pack_test.cc.
#include "format/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>

#include "format/testing.h"

namespace fanstore::format {
namespace {

using testing::CraftShard;
using testing::Dir;
using testing::RawFile;
using testing::TempDir;
using testing::WriteDataset;

constexpr uint64_t kId = 0x1122334455667788ull;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override { ds_ = t_.path() + "/ds.fs"; }
  // Two shards: a/ and a/one in shard 0, a/two and top in shard 1.
  void WriteGood() {
    WriteDataset(
        ds_, kId,
        {CraftShard(kId, 0, {Dir("a"), RawFile("a/one", 0, "1")}, "1"),
         CraftShard(kId, 1, {RawFile("a/two", 0, "22"), RawFile("top", 2, "333")}, "22333")});
  }
  Result<std::unique_ptr<Dataset>> Open() { return Dataset::Open(ds_); }
  TempDir t_;
  std::string ds_;
};

TEST_F(DatasetTest, FindLocatesEveryEntryAcrossShards) {
  WriteGood();
  auto ds = Open();
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->shard_count(), 2u);
  Dataset::Ref ref{9, 9};
  const IndexEntry* e = (*ds)->Find("a/two", &ref);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(ref.shard, 1u);
  EXPECT_EQ(ref.entry, 0u);
  EXPECT_EQ(e, &(*ds)->shard(1).entries[0]);
  EXPECT_EQ((*ds)->Find("a")->type, EntryType::kDir);
  EXPECT_EQ((*ds)->Find("top")->size, 3u);
  EXPECT_EQ((*ds)->Find("missing"), nullptr);
  EXPECT_EQ((*ds)->Find(""), nullptr);  // the root has no entry
  EXPECT_EQ((*ds)->Find("a/"), nullptr);
}

TEST_F(DatasetTest, SortedEntriesListsEachEntryOnceInPathOrder) {
  WriteGood();
  auto ds = Open();
  ASSERT_TRUE(ds.ok());
  std::vector<std::string> paths;
  for (const IndexEntry* e : (*ds)->SortedEntries()) paths.push_back(e->path);
  EXPECT_EQ(paths, (std::vector<std::string>{"a", "a/one", "a/two", "top"}));
}

TEST_F(DatasetTest, TrailingSlashesAreDropped) {
  WriteGood();
  auto ds = Dataset::Open(ds_ + "//");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->dir(), ds_);
  EXPECT_EQ((*ds)->shard(0).path, ds_ + "/shard-00000.fsd");
}

TEST_F(DatasetTest, AMissingPathOrAFileIsNotADataset) {
  auto missing = Open();
  EXPECT_TRUE(missing.status().IsNotFound());
  testing::WriteFile(ds_, "x");
  auto file = Open();
  EXPECT_EQ(file.status().code(), Status::Code::kInvalidArgument);
}

TEST_F(DatasetTest, APathInTwoShardsIsRefused) {
  WriteDataset(ds_, kId,
               {CraftShard(kId, 0, {RawFile("same", 0, "1")}, "1"),
                CraftShard(kId, 1, {RawFile("same", 0, "2")}, "2")});
  auto ds = Open();
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("'same' appears twice"), std::string::npos)
      << ds.status().ToString();
  EXPECT_NE(ds.status().message().find("shard-00001.fsd"), std::string::npos);
}

TEST_F(DatasetTest, EveryParentMustBeADirectoryEntry) {
  WriteDataset(ds_, kId, {CraftShard(kId, 0, {RawFile("orphan/f", 0, "1")}, "1")});
  auto ds = Open();
  EXPECT_NE(ds.status().message().find("'orphan/f' has no parent directory entry"),
            std::string::npos)
      << ds.status().ToString();
  WriteDataset(ds_, kId,
               {CraftShard(kId, 0, {RawFile("f", 0, "1"), RawFile("f/g", 1, "2")}, "12")});
  ds = Open();
  EXPECT_NE(ds.status().message().find("'f/g' has no parent directory entry"), std::string::npos)
      << ds.status().ToString();
}

TEST_F(DatasetTest, ADictionaryFrameNeedsADictionary) {
  IndexEntry e = RawFile("f", 0, "1");
  e.codec = Codec::kZstdDict;
  e.stored_len = 1;
  e.size = 1;
  WriteDataset(ds_, kId, {CraftShard(kId, 0, {e}, "1")});
  auto ds = Open();
  EXPECT_NE(ds.status().message().find("needs a dictionary the manifest does not list"),
            std::string::npos)
      << ds.status().ToString();
}

TEST_F(DatasetTest, ShardsMustBeInManifestOrder) {
  // Both shards are sound, but listed the wrong way round: each holds another id.
  WriteDataset(ds_, kId,
               {CraftShard(kId, 1, {RawFile("x", 0, "1")}, "1"),
                CraftShard(kId, 0, {RawFile("y", 0, "2")}, "2")});
  auto ds = Open();
  EXPECT_NE(ds.status().message().find("holds shard id 1 where the manifest expects 0"),
            std::string::npos)
      << ds.status().ToString();
}

TEST_F(DatasetTest, VerifyReportsProgressUpToTheTotal) {
  WriteGood();
  auto ds = Open();
  ASSERT_TRUE(ds.ok());
  const uint64_t total = (*ds)->shard(0).size + (*ds)->shard(1).size;
  uint64_t last = 0, calls = 0, last_files = 0, files_total = 0;
  VerifyOptions o;
  o.threads = 2;
  o.progress = [&](uint64_t done, uint64_t all, uint64_t files, uint64_t files_all) {
    EXPECT_EQ(all, total);
    EXPECT_GE(done, last);
    EXPECT_GE(files, last_files);
    last = done;
    last_files = files;
    files_total = files_all;
    calls++;
  };
  ASSERT_TRUE(Verify(**ds, o).ok());
  EXPECT_GT(calls, 0u);
  EXPECT_EQ(last, total);
  EXPECT_EQ(files_total, 3u);  // a/one, a/two, top
  EXPECT_EQ(last_files, files_total);
}

TEST_F(DatasetTest, ExtractTakesAnEmptyDirectoryButNotAFullOne) {
  WriteGood();
  auto ds = Open();
  ASSERT_TRUE(ds.ok());
  const std::string out = t_.path() + "/out";
  ASSERT_EQ(::mkdir(out.c_str(), 0700), 0);
  ASSERT_TRUE(Extract(**ds, out, {}).ok());
  EXPECT_EQ(testing::ReadFile(out + "/a/two"), "22");
  EXPECT_EQ(testing::ReadFile(out + "/top"), "333");
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // the manifest's root mode (its default)
  Status s = Extract(**ds, out, {});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not empty"), std::string::npos) << s.ToString();
  EXPECT_TRUE(Extract(**ds, t_.path() + "/no/such", {}).IsNotFound());
}

}  // namespace
}  // namespace fanstore::format
