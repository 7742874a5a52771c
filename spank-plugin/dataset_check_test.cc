// Unit tests of the submission-time dataset check: each failure names the path and the problem.
#include "spank-plugin/dataset_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "spank-plugin/proc.h"
#include "stagein/format.h"
#include "stagein/manifest.h"

namespace fanstore::spank {
namespace {

class DatasetCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fanstore-dscheck.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(root_); }

  static void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  // A dataset directory with a manifest naming one shard; the shard file exists if `with_shard`.
  std::string MakeDataset(const std::string& name, bool with_shard, uint32_t version = format::kVersion) {
    const std::string dir = root_ + "/" + name;
    ::mkdir(dir.c_str(), 0755);
    format::Manifest m;
    m.version = version;
    m.tool_version = "test";
    m.created = "2024-01-01T00:00:00Z";
    m.shards.push_back({"shard-00000.fsd", 10, 1, 0});
    Write(dir + "/manifest.json", format::ManifestToJson(m));
    if (with_shard) Write(dir + "/shard-00000.fsd", "0123456789");
    return dir;
  }

  static void ExpectError(const std::string& path, const std::string& fragment) {
    Status s = CheckDataset(path);
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  }

  std::string root_;
};

TEST_F(DatasetCheckTest, AcceptsAGoodDataset) {
  Status s = CheckDataset(MakeDataset("good.fs", true));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(DatasetCheckTest, Missing) { ExpectError(root_ + "/nope.fs", "does not exist"); }

TEST_F(DatasetCheckTest, RelativePath) { EXPECT_FALSE(CheckDataset("nope.fs").ok()); }

TEST_F(DatasetCheckTest, NotADirectory) {
  Write(root_ + "/file.fs", "x");
  ExpectError(root_ + "/file.fs", "not a FanStore dataset");
}

TEST_F(DatasetCheckTest, NoManifest) {
  ::mkdir((root_ + "/empty.fs").c_str(), 0755);
  ExpectError(root_ + "/empty.fs", "not a FanStore dataset");
}

TEST_F(DatasetCheckTest, NotAManifest) {
  ::mkdir((root_ + "/junk.fs").c_str(), 0755);
  Write(root_ + "/junk.fs/manifest.json", "{\"format\":\"zip\"}");
  ExpectError(root_ + "/junk.fs", "not a FanStore manifest");
}

TEST_F(DatasetCheckTest, WrongVersion) { ExpectError(MakeDataset("v99.fs", true, 99), "unsupported dataset version 99"); }

TEST_F(DatasetCheckTest, MissingShard) { ExpectError(MakeDataset("partial.fs", false), "shard-00000.fsd is missing"); }

TEST_F(DatasetCheckTest, UnreadableByTheUser) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads everything";
  const std::string dir = MakeDataset("private.fs", true);
  ::chmod((dir + "/manifest.json").c_str(), 0);
  ExpectError(dir, "not readable by you");
  ::chmod(dir.c_str(), 0);
  ExpectError(dir, "not readable by you");
  ::chmod(dir.c_str(), 0755);
}

}  // namespace
}  // namespace fanstore::spank
