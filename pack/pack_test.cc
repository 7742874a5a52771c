// Pack, verify and extract round trips, and detection of damaged or hostile datasets.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <sys/xattr.h>

#include "common/hash.h"
#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "common/xattrs.h"
#include "format/dataset.h"
#include "pack/pack.h"

namespace fanstore {
namespace {

using format::Dataset;

void Write(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}
std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class PackTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"pack-test"};
  void SetUp() override {
    base_ = tmp_.path();
    src_ = base_ + "/src";
    ds_ = base_ + "/ds.fs";
    ::mkdir(src_.c_str(), 0755);
    ::mkdir((src_ + "/a").c_str(), 0750);
    ::mkdir((src_ + "/a/b").c_str(), 0755);
    ::mkdir((src_ + "/empty").c_str(), 0700);
    Write(src_ + "/a/text.txt", std::string(5000, 'x') + "hello");
    Write(src_ + "/a/b/rand.bin", Random(200000, 1));
    Write(src_ + "/empty.dat", "");
    Write(src_ + "/caf\xc3\xa9.txt", "non-ascii name");
    for (int i = 0; i < 40; i++) Write(src_ + "/a/f" + std::to_string(i), Random(1000 + i * 97, i));
    ::chmod((src_ + "/a/text.txt").c_str(), 0600);
    ::symlink("a/b", (src_ + "/link").c_str());
    ::symlink("/etc/passwd", (src_ + "/escape").c_str());
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1500000000, 123456789}};
    ::utimensat(AT_FDCWD, (src_ + "/a/text.txt").c_str(), ts, 0);
  }

  Status DoPack(pack::Options o = {}) {
    o.sync = false;
    o.warn = [this](const std::string& w) { warnings_.push_back(w); };
    return pack::Pack(src_, ds_, o, &stats_);
  }
  std::string Shard(int i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "/shard-%05d.fsd", i);
    return ds_ + buf;
  }

  std::string base_, src_, ds_;
  pack::Stats stats_;
  std::vector<std::string> warnings_;
};

TEST_F(PackTest, RoundTripRestoresTreeExactly) {
  pack::Options o;
  o.shard_size = 64 << 10;  // several shards
  ASSERT_TRUE(DoPack(o).ok());
  EXPECT_EQ(stats_.files, 44u);
  EXPECT_EQ(stats_.symlinks, 1u);
  EXPECT_EQ(stats_.dirs, 3u);
  EXPECT_GE(stats_.shards, 3u);
  ASSERT_EQ(warnings_.size(), 1u);  // the escaping symlink
  EXPECT_NE(warnings_[0].find("outside"), std::string::npos);

  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_TRUE(format::Verify(**ds, {}).ok());
  const std::string out = base_ + "/out";
  Status s = format::Extract(**ds, out, {});
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const char* f : {"/a/text.txt", "/a/b/rand.bin", "/empty.dat", "/caf\xc3\xa9.txt", "/a/f39"})
    EXPECT_EQ(Read(src_ + f), Read(out + f)) << f;
  struct stat a, b;
  ASSERT_EQ(::stat((out + "/a/text.txt").c_str(), &b), 0);
  ASSERT_EQ(::stat((src_ + "/a/text.txt").c_str(), &a), 0);
  EXPECT_EQ(a.st_mode, b.st_mode);
  EXPECT_EQ(b.st_mtim.tv_sec, 1500000000);
  EXPECT_EQ(b.st_mtim.tv_nsec, 123456789);
  ASSERT_EQ(::stat((out + "/empty").c_str(), &b), 0);
  EXPECT_TRUE(S_ISDIR(b.st_mode));
  EXPECT_EQ(b.st_mode & 07777, 0700u);
  char target[64] = {};
  ASSERT_GT(::readlink((out + "/link").c_str(), target, sizeof target), 0);
  EXPECT_STREQ(target, "a/b");
  EXPECT_NE(::lstat((out + "/escape").c_str(), &b), 0);
}

// Version 3: each entry's ctime, user.* extended attributes (on files, directories and the top)
// and directory sizes are packed from the tree; extract restores the attributes.
TEST_F(PackTest, CtimeAttributesAndDirectorySizesArePacked) {
  if (::setxattr((src_ + "/a/text.txt").c_str(), "user.label", "n014", 4, 0) != 0)
    GTEST_SKIP() << "no user xattrs on this file system";
  ASSERT_EQ(::setxattr((src_ + "/a").c_str(), "user.dir", "", 0, 0), 0);
  ASSERT_EQ(::setxattr(src_.c_str(), "user.top", "t", 1, 0), 0);
  ASSERT_TRUE(DoPack().ok());
  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  struct stat st;
  ASSERT_EQ(::lstat((src_ + "/a/text.txt").c_str(), &st), 0);
  const format::IndexEntry* f = (*ds)->Find("a/text.txt");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->ctime_ns, int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec);
  EXPECT_EQ(f->Xattrs(), xattrs::Encode({{"user.label", "n014"}}));
  ASSERT_EQ(::lstat((src_ + "/a").c_str(), &st), 0);
  const format::IndexEntry* d = (*ds)->Find("a");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->size, static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(d->Xattrs(), xattrs::Encode({{"user.dir", ""}}));
  EXPECT_EQ((*ds)->manifest().root_xattrs, xattrs::Encode({{"user.top", "t"}}));
  ASSERT_EQ(::lstat(src_.c_str(), &st), 0);
  EXPECT_EQ((*ds)->manifest().root_size, static_cast<uint64_t>(st.st_size));
  const std::string out = base_ + "/out";
  ASSERT_TRUE(format::Extract(**ds, out, {}).ok());
  char v[16] = {};
  EXPECT_EQ(::getxattr((out + "/a/text.txt").c_str(), "user.label", v, sizeof v), 4);
  EXPECT_STREQ(v, "n014");
  EXPECT_EQ(::getxattr((out + "/a").c_str(), "user.dir", v, sizeof v), 0);
  EXPECT_EQ(::getxattr(out.c_str(), "user.top", v, sizeof v), 1);
}

TEST_F(PackTest, ShardsAreBalancedByBytes) {
  for (int i = 0; i < 200; i++)
    Write(src_ + "/a/b/x" + std::to_string(i), Random(10000 + (i % 7) * 3000, i));
  pack::Options o;
  o.shard_size = 500 << 10;
  o.level = 0;
  ASSERT_TRUE(DoPack(o).ok());
  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok());
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& s : (*ds)->manifest().shards) {
    lo = std::min(lo, s.bytes);
    hi = std::max(hi, s.bytes);
  }
  EXPECT_GE((*ds)->manifest().shards.size(), 4u);
  EXPECT_LT(static_cast<double>(hi - lo), 0.1 * hi) << lo << " " << hi;
}

TEST_F(PackTest, CompressesOnlyWhenSmallerAndDictWorks) {
  for (int i = 0; i < 300; i++)
    Write(src_ + "/a/t" + std::to_string(i), "{\"id\": " + std::to_string(i) +
                                                 ", \"label\": \"class-" + std::to_string(i % 10) +
                                                 "\", \"text\": \"lorem ipsum dolor sit amet\"}");
  pack::Options o;
  o.dict = true;
  ASSERT_TRUE(DoPack(o).ok());
  EXPECT_TRUE(stats_.dict_used);
  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const format::IndexEntry* rnd = (*ds)->Find("a/b/rand.bin");
  ASSERT_NE(rnd, nullptr);
  EXPECT_EQ(rnd->codec, format::Codec::kRaw);
  const format::IndexEntry* txt = (*ds)->Find("a/text.txt");
  ASSERT_NE(txt, nullptr);
  EXPECT_NE(txt->codec, format::Codec::kRaw);
  EXPECT_LT(txt->stored_len, txt->size);
  EXPECT_TRUE(format::Verify(**ds, {}).ok());
  ASSERT_TRUE(format::Extract(**ds, base_ + "/out", {}).ok());
  EXPECT_EQ(Read(src_ + "/a/t7"), Read(base_ + "/out/a/t7"));
}

TEST_F(PackTest, StreamFrameGivesEveryFileInPiecesAndRefusesBadFrames) {
  Write(src_ + "/big.txt", std::string(3 << 20, 'z') + "end");  // compressible, > 1 MiB
  Write(src_ + "/big.bin", Random((2 << 20) + 77, 9));          // raw, > 1 MiB
  for (int i = 0; i < 300; i++)
    Write(src_ + "/a/t" + std::to_string(i), "{\"id\": " + std::to_string(i) +
                                                 ", \"label\": \"class-" + std::to_string(i % 10) +
                                                 "\", \"text\": \"lorem ipsum dolor sit amet\"}");
  pack::Options o;
  o.dict = true;
  ASSERT_TRUE(DoPack(o).ok());
  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  std::set<format::Codec> codecs;
  for (const auto* e : (*ds)->SortedEntries()) {
    if (e->type != format::EntryType::kFile) continue;
    format::Dataset::Ref r;
    (*ds)->Find(e->path, &r);
    const auto& sh = (*ds)->shard(r.shard);
    std::string got;
    size_t pieces = 0;
    Status s =
        format::StreamFrame(sh.fd.get(), sh.path, *e, &(*ds)->dict(), [&](std::string_view p) {
          EXPECT_LE(p.size(), 1u << 20);
          got.append(p);
          pieces++;
          return Status::OK();
        });
    ASSERT_TRUE(s.ok()) << e->path << ": " << s.ToString();
    EXPECT_EQ(got, Read(src_ + "/" + e->path)) << e->path;
    if (e->size > (1u << 20)) {
      EXPECT_GT(pieces, 1u) << e->path;
    }
    codecs.insert(e->codec);
  }
  // Raw and zstd frames both streamed (and zstd with the dictionary when pack chose it).
  EXPECT_TRUE(codecs.count(format::Codec::kRaw));
  EXPECT_TRUE(codecs.count(format::Codec::kZstd) || codecs.count(format::Codec::kZstdDict));
  EXPECT_EQ(codecs.count(format::Codec::kZstdDict) != 0, stats_.dict_used);
  // A sink error stops the stream and is returned as is.
  format::Dataset::Ref r;
  const format::IndexEntry* big = (*ds)->Find("big.txt", &r);
  const auto& sh = (*ds)->shard(r.shard);
  Status s = format::StreamFrame(sh.fd.get(), sh.path, *big, &(*ds)->dict(),
                                 [](std::string_view) { return Status::NoSpace("disk full"); });
  EXPECT_EQ(s.ToString().find("disk full") != std::string::npos, true) << s.ToString();
  // A flipped byte in the frame is a Corruption naming the file, never data passed as good.
  const std::string shard = sh.path;
  const uint64_t off = big->offset + big->stored_len / 2;
  ds->reset();
  std::string b = Read(shard).substr(off, 1);
  b[0] ^= 0x20;
  int fd = ::open(shard.c_str(), O_WRONLY);
  ASSERT_EQ(::pwrite(fd, b.data(), 1, off), 1);
  ::close(fd);
  auto again = Dataset::Open(ds_);
  ASSERT_TRUE(again.ok());
  const format::IndexEntry* e = (*again)->Find("big.txt", &r);
  const auto& sh2 = (*again)->shard(r.shard);
  s = format::StreamFrame(sh2.fd.get(), sh2.path, *e, &(*again)->dict(),
                          [](std::string_view) { return Status::OK(); });
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("big.txt"), std::string::npos) << s.message();
}

TEST_F(PackTest, ExistingDestinationIsRefused) {
  ::mkdir(ds_.c_str(), 0755);
  Status s = DoPack();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("already exists"), std::string::npos);
}

// Unreadable and vanished sources are tested as an unprivileged user in
// tests/integration/cli_test.sh.

TEST_F(PackTest, CancelLeavesNothing) {
  std::atomic<bool> cancel{true};
  pack::Options o;
  o.cancel = &cancel;
  EXPECT_FALSE(DoPack(o).ok());
  struct stat st;
  EXPECT_NE(::stat(ds_.c_str(), &st), 0);
  EXPECT_EQ(Read(base_ + "/ds.fs.tmp-" + std::to_string(getpid())), "");
}

TEST_F(PackTest, SkipsSocketsWithWarning) {
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s/sock", src_.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::mkfifo((src_ + "/fifo").c_str(), 0644);
  ASSERT_TRUE(DoPack().ok());
  ::close(s);
  EXPECT_EQ(stats_.skipped, 3u);
  bool sock = false, fifo = false;
  for (auto& w : warnings_) {
    sock |= w.find("socket") != std::string::npos;
    fifo |= w.find("FIFO") != std::string::npos;
  }
  EXPECT_TRUE(sock && fifo);
}

// --- damaged datasets ------------------------------------------------------------------

class DamageTest : public PackTest {
 protected:
  void SetUp() override {
    PackTest::SetUp();
    pack::Options o;
    o.shard_size = 64 << 10;
    ASSERT_TRUE(DoPack(o).ok());
  }
  Status OpenAndVerify() {
    auto ds = Dataset::Open(ds_);
    if (!ds.ok()) return ds.status();
    return format::Verify(**ds, {});
  }
  void Patch(const std::string& path, uint64_t off, const std::string& bytes) {
    int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), off), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
};

TEST_F(DamageTest, FlippedDataByteNamesShardFileAndOffset) {
  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok());
  const format::IndexEntry* e = (*ds)->Find("a/b/rand.bin");
  format::Dataset::Ref r;
  (*ds)->Find("a/b/rand.bin", &r);
  std::string shard = (*ds)->shard(r.shard).path;
  const uint64_t frame_off = e->offset;
  uint64_t off = frame_off + 1000;
  ds->reset();
  std::string b = Read(shard).substr(off, 1);
  b[0] ^= 0x40;
  Patch(shard, off, b);
  Status s = OpenAndVerify();
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(shard), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("a/b/rand.bin"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("offset " + std::to_string(frame_off)), std::string::npos)
      << s.message();
}

TEST_F(DamageTest, LowestDamagedShardIsReportedWhateverTheThreads) {
  auto ds = Dataset::Open(ds_);
  ASSERT_TRUE(ds.ok());
  const size_t n = (*ds)->shard_count();
  ASSERT_GE(n, 4u);
  // Damage a frame byte of the second and the last shard.
  for (size_t i : {size_t{1}, n - 1}) {
    const auto& sh = (*ds)->shard(i);
    const format::IndexEntry* frame = nullptr;
    for (const auto& e : sh.entries)
      if (e.stored_len > 0) frame = &e;
    ASSERT_NE(frame, nullptr);
    std::string b = Read(sh.path).substr(frame->offset, 1);
    b[0] ^= 0x01;
    Patch(sh.path, frame->offset, b);
  }
  const std::string second = (*ds)->shard(1).path;
  ds->reset();
  for (size_t threads : {1, 2, 3, 8}) {
    auto again = Dataset::Open(ds_);
    ASSERT_TRUE(again.ok());
    format::VerifyOptions vo;
    vo.threads = threads;
    Status s = format::Verify(**again, vo);
    ASSERT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(second), std::string::npos) << threads << ": " << s.message();
  }
}

TEST_F(DamageTest, TruncatedShard) {
  ASSERT_EQ(::truncate(Shard(1).c_str(), 100), 0);
  Status s = OpenAndVerify();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("shard-00001"), std::string::npos);
}

TEST_F(DamageTest, MissingShard) {
  ASSERT_EQ(::unlink(Shard(2).c_str()), 0);
  Status s = OpenAndVerify();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing shard"), std::string::npos) << s.message();
}

TEST_F(DamageTest, WrongMagicAndVersion) {
  Patch(Shard(0), 0, "NOTSHARD");
  Status s = OpenAndVerify();
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
  Patch(Shard(0), 0, std::string(format::kShardMagic, 8) + std::string("\x09\0\0\0", 4));
  s = OpenAndVerify();
  EXPECT_NE(s.message().find("version"), std::string::npos) << s.message();
}

TEST_F(DamageTest, CorruptManifest) {
  std::string m = Read(ds_ + "/manifest.json");
  Write(ds_ + "/manifest.json", m.substr(0, m.size() / 2));
  Status s = OpenAndVerify();
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("JSON"), std::string::npos) << s.message();
  const std::string version = "\"version\": " + std::to_string(format::kVersion);
  size_t v = m.find(version);
  ASSERT_NE(v, std::string::npos);
  Write(ds_ + "/manifest.json", m.substr(0, v) + "\"version\": 99" + m.substr(v + version.size()));
  s = OpenAndVerify();
  EXPECT_NE(s.message().find("version 99"), std::string::npos) << s.message();
  size_t f = m.find("shard-00000.fsd");
  Write(ds_ + "/manifest.json", m.substr(0, f) + "../../../etc/pwd" + m.substr(f + 15));
  s = OpenAndVerify();
  EXPECT_NE(s.message().find("unsafe"), std::string::npos) << s.message();
  ::unlink((ds_ + "/manifest.json").c_str());
  s = OpenAndVerify();
  EXPECT_NE(s.message().find("not a FanStore dataset"), std::string::npos) << s.message();
}

TEST_F(DamageTest, ShardSwappedFromAnotherDatasetIsRejected) {
  std::string other = base_ + "/other.fs";
  pack::Options o;
  o.sync = false;
  o.shard_size = 64 << 10;
  ASSERT_TRUE(pack::Pack(src_, other, o, nullptr).ok());
  Write(Shard(1), Read(other + "/shard-00001.fsd"));
  Status s = OpenAndVerify();
  EXPECT_FALSE(s.ok());
}

// A shard whose index is hostile (crafted with a valid checksum) is rejected on open, and
// extraction never writes outside DEST.
TEST_F(DamageTest, HostileIndexIsRejected) {
  auto ds0 = Dataset::Open(ds_);
  ASSERT_TRUE(ds0.ok());
  const uint64_t dataset_id = (*ds0)->manifest().dataset_id;
  ds0->reset();
  for (const char* evil : {"../escape", "/abs/path"}) {
    std::vector<format::IndexEntry> v(1);
    v[0].path = evil;
    v[0].mode = 0644;
    v[0].size = v[0].stored_len = 4;
    v[0].offset = format::kHeaderSize;
    std::string raw = format::EncodeIndexRaw(v);
    std::string stored(ZSTD_compressBound(raw.size()), '\0');
    stored.resize(ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3));
    format::Footer f;
    f.index_offset = format::kHeaderSize + 4;
    f.index_stored_len = stored.size();
    f.index_raw_len = raw.size();
    f.index_xxh3 = Xxh3(stored);
    f.entry_count = 1;
    f.shard_id = 1;
    f.dataset_id = dataset_id;
    std::string shard = format::EncodeHeader({format::kVersion, 1, f.dataset_id}) + "evil" +
                        stored + format::EncodeFooter(f);
    Write(Shard(1), shard);
    Status s = OpenAndVerify();
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find("unsafe path"), std::string::npos) << s.message();
  }
  struct stat st;
  EXPECT_NE(::stat((base_ + "/escape").c_str(), &st), 0);
}

}  // namespace
}  // namespace fanstore
