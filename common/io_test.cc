#include "common/io.h"
#include "common/testing/temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace fanstore {
namespace {

class IoTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"io-test"};
  void SetUp() override {
    dir_ = tmp_.path();
    old_umask_ = ::umask(022);
  }
  void TearDown() override { ::umask(old_umask_); }
  std::string Make(const std::string& name, const std::string& data) {
    const std::string p = dir_ + "/" + name;
    UniqueFD fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(WriteFull(fd.get(), data.data(), data.size(), p).ok());
    return p;
  }
  static ino_t Inode(int fd) {
    struct stat st;
    return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
  }
  static ino_t Inode(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  }
  std::string dir_;
  mode_t old_umask_ = 0;
};

TEST_F(IoTest, ReadSmallFileReadsTheWholeFile) {
  const std::string data(10000, 'q');
  auto r = ReadSmallFile(Make("f", data), 10000);  // exactly the limit
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, data);
  auto empty = ReadSmallFile(Make("e", ""), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST_F(IoTest, ReadSmallFileOfAMissingFileIsNotFoundNamingIt) {
  auto r = ReadSmallFile(dir_ + "/missing", 100);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_NE(r.status().message().find(dir_ + "/missing"), std::string::npos);
}

TEST_F(IoTest, ReadSmallFileRefusesAFileOverTheLimit) {
  auto r = ReadSmallFile(Make("big", std::string(101, 'b')), 100);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsCorruption());
  EXPECT_NE(r.status().message().find("too large"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("101"), std::string::npos) << r.status().ToString();
}

TEST_F(IoTest, ReadSmallFileRefusesADirectory) {
  auto r = ReadSmallFile(dir_, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos);
}

// Files of /proc report st_size 0 but have content: it must be read to the end.
TEST_F(IoTest, ReadSmallFileReadsAProcFileWhoseSizeSaysZero) {
  struct stat st;
  ASSERT_EQ(::stat("/proc/self/status", &st), 0);
  ASSERT_EQ(st.st_size, 0);
  auto r = ReadSmallFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rfind("Name:", 0), 0u) << *r;
  EXPECT_NE(r->find("\nPid:"), std::string::npos);
  // The limit holds for them too, though st_size cannot tell.
  auto small = ReadSmallFile("/proc/self/status", 16);
  ASSERT_FALSE(small.ok());
  EXPECT_TRUE(small.status().IsCorruption());
  EXPECT_NE(small.status().message().find("too large"), std::string::npos);
}

TEST_F(IoTest, PreadFullReadsAtAnOffsetAndNamesAShortFile) {
  const std::string p = Make("f", "0123456789");
  UniqueFD fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  char buf[4];
  ASSERT_TRUE(PreadFull(fd.get(), buf, 4, 3, "f").ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  Status s = PreadFull(fd.get(), buf, 4, 8, "the file");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("the file"), std::string::npos);
  EXPECT_NE(s.message().find("offset 10"), std::string::npos) << s.ToString();
  s = PreadFull(-1, buf, 4, 0, "nothing");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nothing"), std::string::npos);
}

TEST_F(IoTest, WriteFullWritesEverythingOrNamesTheTarget) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFD rd(p[0]), wr(p[1]);
  ASSERT_TRUE(WriteFull(wr.get(), "hello", 5, "pipe").ok());
  char buf[8];
  EXPECT_EQ(::read(rd.get(), buf, sizeof buf), 5);
  Status s = WriteFull(rd.get(), "x", 1, "the read end");  // not writable
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the read end"), std::string::npos);
}

// Writes `data` to a new file through a SparseWriter, in pieces of `piece` bytes; checks that
// the same bytes read back and returns the file, open, for its holes.
UniqueFD WriteSparse(const std::string& path, const std::string& data, size_t piece) {
  UniqueFD fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  EXPECT_TRUE(fd.valid());
  SparseWriter w(fd.get(), path);
  for (size_t at = 0; at < data.size(); at += piece)
    EXPECT_TRUE(w.Write(std::string_view(data).substr(at, piece)).ok());
  EXPECT_TRUE(w.Finish().ok());
  auto back = ReadSmallFile(path, 1 << 20);
  EXPECT_TRUE(back.ok() && *back == data) << "pieces of " << piece;
  return fd;
}

// Whole aligned blocks of zeros become holes, wherever the pieces end; the bytes read back are
// the same, and a file that ends in a hole gets its size.
TEST_F(IoTest, SparseWriterLeavesHolesForBlocksOfZeros) {
  constexpr size_t B = SparseWriter::kBlock;
  std::string data(5 * B, '\0');
  data.replace(B + 10, 4, "data");  // block 1 holds data; 0, 2, 3 and 4 are zeros
  data[2 * B - 1] = 'x';
  for (size_t piece : {size_t{1000}, B, B + 12, 3 * B + 7, data.size()}) {
    UniqueFD fd = WriteSparse(dir_ + "/sparse" + std::to_string(piece), data, piece);
    EXPECT_EQ(::lseek(fd.get(), 0, SEEK_DATA), static_cast<off_t>(B)) << "pieces of " << piece;
    EXPECT_EQ(::lseek(fd.get(), B, SEEK_HOLE), static_cast<off_t>(2 * B)) << "pieces of " << piece;
  }
}

// A file whose last block is short: one pwrite when it comes in one piece, and the same bytes
// when a piece ends inside a block of data and the next completes it.
TEST_F(IoTest, SparseWriterShortLastBlock) {
  constexpr size_t B = SparseWriter::kBlock;
  std::string data(2 * B + 100, 'd');
  data.replace(B, B, std::string(B, '\0'));  // a hole in the middle
  for (size_t piece : {size_t{50}, B + 50, data.size()}) {
    UniqueFD fd = WriteSparse(dir_ + "/short" + std::to_string(piece), data, piece);
    EXPECT_EQ(::lseek(fd.get(), B, SEEK_HOLE), static_cast<off_t>(B)) << "pieces of " << piece;
    EXPECT_EQ(::lseek(fd.get(), B, SEEK_DATA), static_cast<off_t>(2 * B)) << "pieces of " << piece;
  }
}

TEST_F(IoTest, WriteFileAtomicCreatesWithTheModeAndReplacesWhole) {
  const std::string p = dir_ + "/status.json";
  ASSERT_TRUE(WriteFileAtomic(p, "first version, long", 0600).ok());
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  const ino_t before = Inode(p);
  ASSERT_TRUE(WriteFileAtomic(p, "second", 0600).ok());
  EXPECT_EQ(ReadSmallFile(p, 100).value(), "second");
  EXPECT_NE(Inode(p), before);  // a new file renamed over the old: readers never see a mix
  EXPECT_NE(::access((p + ".tmp").c_str(), F_OK), 0);
  const std::string q = dir_ + "/shared";
  ASSERT_TRUE(WriteFileAtomic(q, "", 0644).ok());
  ASSERT_EQ(::stat(q.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_size, 0);
}

TEST_F(IoTest, WriteFileAtomicGivesTheModeAskedForOverAStaleTemporary) {
  const std::string p = dir_ + "/status.json";
  UniqueFD stale(::open((p + ".tmp").c_str(), O_WRONLY | O_CREAT, 0666));
  ASSERT_TRUE(stale.valid());
  ASSERT_EQ(::fchmod(stale.get(), 0666), 0);  // left by a crash, readable by all
  ASSERT_TRUE(WriteFileAtomic(p, "new", 0600).ok());
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(IoTest, WriteFileAtomicNeverWritesThroughAPlantedSymlink) {
  const std::string victim = Make("victim", "untouched");
  const std::string p = dir_ + "/out";
  ASSERT_EQ(::symlink(victim.c_str(), (p + ".tmp").c_str()), 0);
  Status s = WriteFileAtomic(p, "evil", 0600);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(p + ".tmp"), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadSmallFile(victim, 100).value(), "untouched");
  EXPECT_NE(::access(p.c_str(), F_OK), 0);
}

TEST_F(IoTest, WriteFileAtomicInAMissingDirectoryFailsAndLeavesNothing) {
  Status s = WriteFileAtomic(dir_ + "/no/such", "x", 0600);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  // rename fails onto a directory: the temporary is removed again.
  ASSERT_EQ(::mkdir((dir_ + "/d").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir_ + "/d/x").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir_ + "/d/x/sub").c_str(), 0700), 0);
  s = WriteFileAtomic(dir_ + "/d/x", "x", 0600);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rename"), std::string::npos) << s.ToString();
  EXPECT_NE(::access((dir_ + "/d/x.tmp").c_str(), F_OK), 0);
}

TEST_F(IoTest, OpenParentDirWalksToTheParentAndGivesTheLeaf) {
  ASSERT_EQ(::mkdir((dir_ + "/a").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir_ + "/a/b").c_str(), 0700), 0);
  UniqueFD root(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string leaf;
  auto fd = OpenParentDir(root.get(), "a/b/c.txt", &leaf);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(leaf, "c.txt");
  EXPECT_EQ(Inode(fd->get()), Inode(dir_ + "/a/b"));
  auto top = OpenParentDir(root.get(), "top", &leaf);
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(leaf, "top");
  EXPECT_EQ(Inode(top->get()), Inode(dir_));
  EXPECT_NE(top->get(), root.get());  // a descriptor of its own
  auto missing = OpenParentDir(root.get(), "a/nope/x", &leaf);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_NE(missing.status().message().find("a/nope"), std::string::npos);
}

TEST_F(IoTest, OpenParentDirNeverFollowsASymlink) {
  ASSERT_EQ(::mkdir((dir_ + "/real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("real", (dir_ + "/link").c_str()), 0);
  ASSERT_EQ(::symlink("/", (dir_ + "/escape").c_str()), 0);
  UniqueFD root(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string leaf;
  EXPECT_FALSE(OpenParentDir(root.get(), "link/f", &leaf).ok());
  EXPECT_FALSE(OpenParentDir(root.get(), "escape/etc/passwd", &leaf).ok());
}

TEST_F(IoTest, MakeDirsCreatesEveryMissingLevelWithTheMode) {
  UniqueFD root(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(MakeDirs(root.get(), "x/y/z", 0700).ok());
  struct stat st;
  for (const char* d : {"/x", "/x/y", "/x/y/z"}) {
    ASSERT_EQ(::lstat((dir_ + d).c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0700u) << d;
  }
  EXPECT_TRUE(MakeDirs(root.get(), "x/y/z", 0700).ok());  // existing levels are fine
  EXPECT_TRUE(MakeDirs(root.get(), "x/y/w", 0700).ok());
  ASSERT_EQ(::lstat((dir_ + "/x/y/w").c_str(), &st), 0);
}

TEST_F(IoTest, MakeDirsRefusesASymlinkOrAFileInTheWay) {
  ASSERT_EQ(::mkdir((dir_ + "/elsewhere").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("elsewhere", (dir_ + "/link").c_str()), 0);
  Make("file", "x");
  UniqueFD root(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  Status s = MakeDirs(root.get(), "link/sub", 0700);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("link"), std::string::npos);
  EXPECT_NE(::access((dir_ + "/elsewhere/sub").c_str(), F_OK), 0);
  EXPECT_FALSE(MakeDirs(root.get(), "file/sub", 0700).ok());
}

}  // namespace
}  // namespace fanstore
