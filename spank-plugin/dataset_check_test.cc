// Unit tests of the submission-time dataset check: each failure names the path and the problem.
#include "spank-plugin/dataset_check.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "format/format.h"
#include "format/manifest.h"
#include "spank-plugin/proc.h"

namespace fanstore::spank {
namespace {

class DatasetCheckTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"dscheck-test"};
  void SetUp() override { root_ = tmp_.path(); }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  // A dataset directory with a manifest naming one shard; the shard file exists if `with_shard`.
  std::string MakeDataset(const std::string& name, bool with_shard,
                          uint32_t version = format::kVersion) {
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

TEST_F(DatasetCheckTest, WrongVersion) {
  ExpectError(MakeDataset("v99.fs", true, 99), "unsupported dataset version 99");
}

TEST_F(DatasetCheckTest, MissingShard) {
  ExpectError(MakeDataset("partial.fs", false), "shard-00000.fsd is missing");
}

// CheckDataset run as an unprivileged user (the submitting user is never root in practice):
// as root, in a child that drops to nobody; otherwise in this process.
Status CheckAsUser(const std::string& path) {
  if (::geteuid() != 0) return CheckDataset(path);
  int p[2];
  if (::pipe(p) != 0) return Status::IOError("pipe");
  pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(2);
    Status s = CheckDataset(path);
    std::string msg = s.ok() ? "" : s.message();
    ssize_t ignored = ::write(p[1], msg.data(), msg.size());
    (void)ignored;
    ::_exit(s.ok() ? 0 : 1);
  }
  ::close(p[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) msg.append(buf, n);
  ::close(p[0]);
  int ws = 0;
  ::waitpid(child, &ws, 0);
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return Status::OK();
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 2) return Status::IOError("could not drop privileges");
  return Status::Permission(msg);
}

TEST_F(DatasetCheckTest, UnreadableByTheUser) {
  ::chmod(root_.c_str(), 0755);  // the user can reach the datasets; only their modes stop them
  const std::string dir = MakeDataset("private.fs", true);
  ASSERT_TRUE(CheckAsUser(dir).ok());
  for (const std::string& blocked : {dir + "/manifest.json", dir}) {
    ::chmod(blocked.c_str(), 0);
    Status s = CheckAsUser(dir);
    ASSERT_FALSE(s.ok()) << blocked;
    EXPECT_NE(s.message().find(dir), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("not readable by you"), std::string::npos) << s.message();
    ::chmod(blocked.c_str(), blocked == dir ? 0755 : 0644);
  }
}

}  // namespace
}  // namespace fanstore::spank
