#include "image/dataset_image.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "pack/pack.h"

namespace fanstore::image {
namespace {

void Put(const std::string& path, size_t size, int seed) {
  std::string c(size, '\0');
  for (size_t k = 0; k < size; k++)
    c[k] = static_cast<char>((k * 31 + static_cast<size_t>(seed) * 101) & 0xff);
  std::ofstream(path, std::ios::binary) << c;
}

// A packed tree of several shards: small files (many per shard, so that the blob's writes are
// gathered), one file large enough to be streamed, an empty file and directory, a symlink and a
// hard link; the source tree beside it.
class DatasetImage : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_.path() + "/src";
    ds_ = dir_.path() + "/ds.fs";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    for (int d = 0; d < 4; d++) {
      const std::string sub = src_ + "/class" + std::to_string(d);
      ASSERT_EQ(::mkdir(sub.c_str(), 0750), 0);
      for (int f = 0; f < 200; f++)
        Put(sub + "/img" + std::to_string(f) + ".jpg", 100 + (f * 37) % 3000, d * 1000 + f);
    }
    Put(src_ + "/big.bin", (5u << 20) + 123, 7);
    Put(src_ + "/empty", 0, 0);
    ASSERT_EQ(::mkdir((src_ + "/nothing").c_str(), 0700), 0);
    ASSERT_EQ(::symlink("class1/img3.jpg", (src_ + "/link").c_str()), 0);
    ASSERT_EQ(::link((src_ + "/class2/img5.jpg").c_str(), (src_ + "/hard").c_str()), 0);
    pack::Options o;
    o.sync = false;
    o.shard_size = 64 << 10;  // many shards
    Status st = pack::Pack(src_, ds_, o, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // Writes the image with these options into DIR/img; the dataset as opened.
  void WriteImage(const Options& io) {
    auto ds = format::Dataset::Open(ds_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    WriteOptions w;
    w.image = io;
    w.threads = 2;
    Status st = WriteDatasetImage(**ds, dir_.path() + "/img", w);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // diff -r of the source and `tree`: names, bytes, symlink targets.
  void ExpectSameAsSource(const std::string& tree) {
    const std::string cmd =
        "diff -r --no-dereference '" + src_ + "' '" + tree + "' >'" + dir_.path() + "/diff' 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(dir_.path() + "/diff").rdbuf();
  }

  test::TempDir dir_{"dsimage"};
  std::string src_, ds_;
};

TEST_F(DatasetImage, FsckErofsExtractsTheSourceTree) {
  if (::access("/usr/bin/fsck.erofs", X_OK) != 0) {
    GTEST_SKIP() << "fsck.erofs (erofs-utils) is not installed";
  }
  Options io;
  io.block_bits = 12;  // what erofs-utils 1.5 checks
  WriteImage(io);
  const std::string img = dir_.path() + "/img/";
  const std::string cmd = "fsck.erofs --device='" + img + kBlobName + "' --extract='" +
                          dir_.path() + "/out' '" + img + kMetaName + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ExpectSameAsSource(dir_.path() + "/out");
}

TEST_F(DatasetImage, TheKernelServesTheSourceTree) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "mounting needs root";
  }
  WriteImage(Options{});
  const std::string img = dir_.path() + "/img/", mnt = dir_.path() + "/mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  const std::string opts = "device=" + img + kBlobName;
  if (::mount((img + kMetaName).c_str(), mnt.c_str(), "erofs", MS_RDONLY | MS_NOSUID | MS_NODEV,
              opts.c_str()) != 0) {
    if (errno == ENODEV || errno == ENOTBLK) {
      GTEST_SKIP() << "no file-backed erofs here: " << std::strerror(errno);
    }
    FAIL() << "mount: " << std::strerror(errno);
  }
  ExpectSameAsSource(mnt);
  struct stat a, b;
  ASSERT_EQ(::stat((mnt + "/hard").c_str(), &a), 0);
  ASSERT_EQ(::stat((mnt + "/class2/img5.jpg").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(::umount2(mnt.c_str(), 0), 0) << std::strerror(errno);
}

// Writes through the mapping, from several threads at once, and past it through pwrite, land
// at their offsets; the mapping's bytes are the file's.
TEST(BlobWriter, MappedAndPastTheMapWritesLandAtTheirOffsets) {
  test::TempDir dir("blob-writer");
  UniqueFD fd(::open((dir.path() + "/blob").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid());
  constexpr uint64_t kMapped = 4 << 20, kBlock = 512;
  std::string want(kMapped + 3 * kBlock, '\0');
  struct stat st;
  {
    BlobWriter small(fd.get(), kBlock);  // 512 bytes a file: neither reserved nor mapped
    ASSERT_TRUE(small.Map(kMapped, kMapped / kBlock).ok());
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
  }
  {
    BlobWriter out(fd.get(), kBlock);
    ASSERT_TRUE(out.Map(kMapped, 1).ok());
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; t++)
      writers.emplace_back([&, t] {
        for (uint64_t off = t * kBlock; off < kMapped; off += 4 * kBlock) {
          const std::string bytes(kBlock, static_cast<char>('a' + t));
          EXPECT_TRUE(out.Write(off, bytes).ok());
        }
      });
    for (auto& w : writers) w.join();
    for (uint64_t off = 0; off < kMapped; off += kBlock)
      want.replace(off, kBlock, kBlock, static_cast<char>('a' + (off / kBlock) % 4));
    const std::string past(3 * kBlock - 7, 'z');  // past the mapping: written with pwrite
    ASSERT_TRUE(out.Write(kMapped, past).ok());
    want.replace(kMapped, past.size(), past);
    want.resize(kMapped + past.size());
  }
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  ASSERT_EQ(static_cast<uint64_t>(st.st_size), want.size());
  std::string got(want.size(), '\0');
  ASSERT_EQ(::pread(fd.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == want);
}

// A share larger than the disk's free space is refused when the writer maps it, by name, before
// any write: never a SIGBUS from a write through the mapping.
TEST(BlobWriter, NoRoomForTheMappingIsAClearError) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "mounting a small tmpfs needs root";
  }
  test::TempDir dir("blob-writer-full");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // a mount namespace of its own: the tmpfs goes with the child
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        ::mount("small", dir.path().c_str(), "tmpfs", 0, "size=1m") != 0)
      ::_exit(2);
    UniqueFD fd(::open((dir.path() + "/blob").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
    BlobWriter out(fd.get(), 512, "the blob");
    Status st = out.Map(64 << 20, 1);
    ::_exit(st.code() == Status::Code::kNoSpace &&
                    st.message().find("the blob") != std::string::npos
                ? 0
                : 1);
  }
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFEXITED(ws));
  EXPECT_EQ(WEXITSTATUS(ws), 0) << "2: no tmpfs could be mounted; 1: not a clear NoSpace";
}

}  // namespace
}  // namespace fanstore::image
