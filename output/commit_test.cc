#include "output/commit.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "common/hash.h"
#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::output {
namespace {

class CommitTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"commit-test"};
  std::string src_, dst_;
  UniqueFD src_fd_, dst_fd_;
  void SetUp() override {
    src_ = tmp_.path() + "/local";
    dst_ = tmp_.path() + "/pfs";
    ASSERT_EQ(::mkdir(src_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(dst_.c_str(), 0700), 0);
    src_fd_.Reset(::open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    dst_fd_.Reset(::open(dst_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  void Write(const std::string& rel, const std::string& data) {
    const std::string path = src_ + "/" + rel;
    const size_t slash = path.rfind('/');
    ASSERT_EQ(std::system(("mkdir -p '" + path.substr(0, slash) + "'").c_str()), 0);
    UniqueFD fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE(WriteFull(fd.get(), data.data(), data.size(), path).ok());
  }
  std::string Read(const std::string& path) {
    auto r = ReadSmallFile(path, 64 << 20);
    return r.ok() ? r.value() : "<missing>";
  }
  int pieces_ = 0;  // pieces copied and read back, as the pacing hook sees them
  Result<Committed> Commit(const std::string& rel, mode_t umask = 022, bool replace = true,
                           const std::string& as = "") {
    return CommitFile({src_fd_.get(), dst_fd_.get(), rel, as.empty() ? rel : as, umask, replace,
                       nullptr, [this](auto) { pieces_++; }});
  }
  // Names in a directory that look like temporaries.
  int Temporaries(const std::string& dir) {
    int n = 0;
    DIR* d = ::opendir(dir.c_str());
    while (d != nullptr)
      if (struct dirent* e = ::readdir(d)) {
        n += std::string(e->d_name).find(kTempMarker) != std::string::npos;
      } else {
        break;
      }
    if (d != nullptr) ::closedir(d);
    return n;
  }
};

TEST_F(CommitTest, CopiesVerifiesAndRenamesIntoPlaceWithTheUsersMode) {
  std::string data(3 << 20, '\0');
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 131 % 251);
  Write("ckpt/epoch1/model.pt", data);
  auto c = Commit("ckpt/epoch1/model.pt", 027);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->size, data.size());
  EXPECT_EQ(c->xxh3, Xxh3(data));
  EXPECT_EQ(Read(dst_ + "/ckpt/epoch1/model.pt"), data);
  EXPECT_EQ(pieces_, 6);  // 3 MiB copied, 3 read back: the drainer may pause after each
  struct stat st;
  ASSERT_EQ(::stat((dst_ + "/ckpt/epoch1/model.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  ASSERT_EQ(::stat((dst_ + "/ckpt/epoch1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(Temporaries(dst_ + "/ckpt/epoch1"), 0);
  // A second version replaces the first in one step.
  Write("ckpt/epoch1/model.pt", "v2");
  ASSERT_TRUE(Commit("ckpt/epoch1/model.pt", 027).ok());
  EXPECT_EQ(Read(dst_ + "/ckpt/epoch1/model.pt"), "v2");
}

TEST_F(CommitTest, RefusesBadPathsAndFollowsNoSymlink) {
  Write("f", "x");
  for (const char* bad : {"../f", "a//f", "./f", "", "f/"})
    EXPECT_EQ(Commit(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  // On the parallel file system, a directory swapped for a symlink to elsewhere.
  const std::string elsewhere = tmp_.path() + "/elsewhere";
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), (dst_ + "/d").c_str()), 0);
  Write("d/f", "y");
  EXPECT_FALSE(Commit("d/f").ok());
  EXPECT_EQ(Read(elsewhere + "/f"), "<missing>");
  // On the node, a symlink in place of the file.
  ASSERT_EQ(::symlink("/etc/passwd", (src_ + "/link").c_str()), 0);
  EXPECT_FALSE(Commit("link").ok());
  EXPECT_EQ(Read(dst_ + "/link"), "<missing>");
}

// Without `replace`, a name that exists is left alone (another node's), and nothing is left.
TEST_F(CommitTest, WithoutReplaceAnExistingNameIsLeftAlone) {
  Write("log.txt", "mine");
  { UniqueFD fd(::open((dst_ + "/log.txt").c_str(), O_WRONLY | O_CREAT, 0600)); }
  auto c = Commit("log.txt", 022, false);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->name_taken);
  EXPECT_EQ(Read(dst_ + "/log.txt"), "");
  EXPECT_EQ(Temporaries(dst_), 0);
  c = Commit("log.txt", 022, false, "log.txt.node-n2");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->name_taken);
  EXPECT_EQ(Read(dst_ + "/log.txt.node-n2"), "mine");
}

// A copy that reads back other bytes than were written (here, its last piece overwritten once
// the read back has begun) is never put in place, and its temporary is removed.
TEST_F(CommitTest, ACopyThatReadsBackWrongIsNotCommitted) {
  const size_t size = (5 << 20) + 17;  // six pieces: more than the readers, the last one short
  std::string data(size, '\0');
  for (size_t i = 0; i < size; i++) data[i] = static_cast<char>(i * 131 + 7);
  Write("ckpt", data);
  int calls = 0;
  auto tamper = [&](auto) {
    if (++calls != 7) return;  // the first piece read back (the copy took six)
    DIR* d = ::opendir(dst_.c_str());
    ASSERT_NE(d, nullptr);
    while (struct dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).find(kTempMarker) == std::string::npos) continue;
      UniqueFD fd(::open((dst_ + "/" + e->d_name).c_str(), O_WRONLY | O_CLOEXEC));
      ASSERT_EQ(::pwrite(fd.get(), "X", 1, size - 1), 1);
    }
    ::closedir(d);
  };
  auto c = CommitFile({src_fd_.get(), dst_fd_.get(), "ckpt", "ckpt", 022, true, nullptr, tamper});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kCorruption) << c.status().ToString();
  EXPECT_EQ(Read(dst_ + "/ckpt"), "<missing>");
  EXPECT_EQ(Temporaries(dst_), 0);
  // Untouched, the same file commits, and its hash is the whole file's.
  auto ok = Commit("ckpt");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->xxh3, Xxh3(data));
  EXPECT_EQ(pieces_, 12);
  EXPECT_EQ(Read(dst_ + "/ckpt"), data);
}

// A full parallel file system: the error says so, and neither the final name nor a temporary is
// left.
TEST_F(CommitTest, AFullDestinationLeavesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounts need root";
  Write("big", std::string(2 << 20, 'b'));
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
      ::_exit(2);
    if (::mount("full", dst_.c_str(), "tmpfs", 0, "size=1m") != 0) ::_exit(3);
    UniqueFD dst(::open(dst_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto c = CommitFile({src_fd_.get(), dst.get(), "big", "big", 022, true, nullptr, {}});
    if (c.ok() || c.status().code() != Status::Code::kNoSpace) ::_exit(4);
    ::_exit(Temporaries(dst_) == 0 && Read(dst_ + "/big") == "<missing>" ? 0 : 5);
  }
  int status = -1;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace fanstore::output
