// Shard reading below the Dataset: the dictionary, frame decoding, opening a shard against the
// manifest, and the sequential scan. Whole-dataset damage is in pack/pack_test.cc.
#include "format/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/hash.h"
#include "common/thread_pool.h"
#include "format/testing.h"

namespace fanstore::format {
namespace {

using testing::CraftShard;
using testing::Dir;
using testing::RawFile;
using testing::TempDir;
using testing::WriteFile;

constexpr uint64_t kId = 0xabcdef0123456789ull;

IndexEntry ZstdFile(std::string path, uint64_t off, const std::string& content,
                    const std::string& frame) {
  IndexEntry e = RawFile(std::move(path), off, content);
  e.codec = Codec::kZstd;
  e.stored_len = frame.size();
  return e;
}

TEST(Dictionary, AnEmptyReferenceLoadsNothing) {
  Dictionary d;
  ASSERT_TRUE(d.Load("/nonexistent", DictRef{}).ok());
  EXPECT_EQ(d.ddict(), nullptr);
  EXPECT_TRUE(d.bytes().empty());
}

TEST(Dictionary, SizeHashAndLimitAreChecked) {
  TempDir t;
  const std::string bytes(2000, 'd');
  WriteFile(t.path() + "/dict.zstd", bytes);
  DictRef ref{"dict.zstd", bytes.size(), Xxh3(bytes), 7};
  {
    Dictionary d;
    ASSERT_TRUE(d.Load(t.path(), ref).ok());
    EXPECT_NE(d.ddict(), nullptr);
    EXPECT_EQ(d.bytes(), bytes);
  }
  for (auto edit : {+[](DictRef& r) { r.bytes++; }, +[](DictRef& r) { r.xxh3 ^= 1; }}) {
    DictRef bad = ref;
    edit(bad);
    Dictionary d;
    Status s = d.Load(t.path(), bad);
    EXPECT_TRUE(s.IsCorruption());
    EXPECT_NE(s.message().find("checksum or size mismatch"), std::string::npos) << s.ToString();
    EXPECT_EQ(d.ddict(), nullptr);
  }
  DictRef huge = ref;
  huge.bytes = kMaxDictBytes + 1;
  Dictionary d;
  Status s = d.Load(t.path(), huge);
  EXPECT_NE(s.message().find("larger than"), std::string::npos) << s.ToString();
  DictRef gone = ref;
  gone.file = "other.zstd";
  EXPECT_TRUE(d.Load(t.path(), gone).IsNotFound());
}

TEST(FrameDecoder, RawFramesAreTheStoredBytes) {
  const std::string content = "raw content";
  IndexEntry e = RawFile("f", 64, content);
  FrameDecoder dec;
  std::string_view raw;
  ASSERT_TRUE(dec.Decode(e, content, nullptr, &raw).ok());
  EXPECT_EQ(raw.data(), content.data());  // no copy
  e.xxh3 ^= 1;
  Status s = dec.Decode(e, content, nullptr, &raw);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("file 'f' (frame at offset 64)"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("checksum"), std::string::npos);
}

TEST(FrameDecoder, ZstdFramesDecodeIntoScratchOrTheDecodersBuffer) {
  const std::string content(100000, 'z');
  const std::string frame = testing::Zstd(content);
  const IndexEntry e = ZstdFile("z", 64, content, frame);
  FrameDecoder dec;
  std::string scratch;
  std::string_view raw;
  ASSERT_TRUE(dec.Decode(e, frame, &scratch, &raw).ok());
  EXPECT_EQ(raw, content);
  EXPECT_EQ(raw.data(), scratch.data());
  ASSERT_TRUE(dec.Decode(e, frame, nullptr, &raw).ok());
  EXPECT_EQ(raw, content);
  EXPECT_NE(raw.data(), scratch.data());
}

TEST(FrameDecoder, FramesThatDisagreeWithTheirEntryAreCorruption) {
  const std::string content(5000, 'q');
  const std::string frame = testing::Zstd(content);
  FrameDecoder dec;
  std::string_view raw;
  auto error = [&](IndexEntry e, std::string_view stored) {
    Status s = dec.Decode(e, stored, nullptr, &raw);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    return s.message();
  };
  IndexEntry e = ZstdFile("z", 64, content, frame);
  EXPECT_NE(error(e, std::string_view(frame).substr(1)).find("frame length mismatch"),
            std::string::npos);
  IndexEntry wrong_size = e;
  wrong_size.size = content.size() + 1;
  EXPECT_NE(error(wrong_size, frame).find("not a zstd frame of 5001 bytes"), std::string::npos);
  IndexEntry wrong_hash = e;
  wrong_hash.xxh3 ^= 1;
  EXPECT_NE(error(wrong_hash, frame).find("checksum"), std::string::npos);
  IndexEntry needs_dict = e;
  needs_dict.codec = Codec::kZstdDict;
  EXPECT_NE(error(needs_dict, frame).find("dictionary"), std::string::npos);
  IndexEntry too_big = e;
  too_big.size = kMaxWholeFrame + 1;
  EXPECT_NE(error(too_big, frame).find("stream it"), std::string::npos);
  std::string garbage = frame;
  garbage[garbage.size() / 2] ^= 0x55;
  EXPECT_FALSE(dec.Decode(e, garbage, nullptr, &raw).ok());
}

TEST(FrameDecoder, ASymlinkTargetMustStayInside) {
  IndexEntry e = RawFile("a/link", 64, "../../etc");
  e.type = EntryType::kSymlink;
  FrameDecoder dec;
  std::string_view raw;
  Status s = dec.Decode(e, "../../etc", nullptr, &raw);
  EXPECT_NE(s.message().find("outside"), std::string::npos) << s.ToString();
  e = RawFile("a/link", 64, "../b");
  e.type = EntryType::kSymlink;
  EXPECT_TRUE(dec.Decode(e, "../b", nullptr, &raw).ok());
}

TEST(DecoderPool, OneDecoderPerThread) {
  DecoderPool pool(nullptr);
  FrameDecoder* mine = pool.Get();
  EXPECT_EQ(pool.Get(), mine);
  FrameDecoder* other = nullptr;
  std::thread([&] { other = pool.Get(); }).join();
  EXPECT_NE(other, nullptr);
  EXPECT_NE(other, mine);
}

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Frames: "alpha" raw, a zstd frame, an empty file sharing an offset, a symlink.
    const std::string big(20000, 'b');
    frame_ = testing::Zstd(big);
    data_ = "alpha" + frame_ + "x";
    entries_ = {Dir("d"), RawFile("d/alpha", 0, "alpha"), ZstdFile("d/big", 5, big, frame_),
                RawFile("empty", 5, ""), RawFile("link", 5 + frame_.size(), "x")};
    entries_.back().type = EntryType::kSymlink;
    content_ = {{"d/alpha", "alpha"}, {"d/big", big}, {"empty", ""}, {"link", "x"}};
    bytes_ = CraftShard(kId, 3, entries_, data_);
    path_ = t_.path() + "/shard";
    WriteFile(path_, bytes_);
    ref_ = {"shard", bytes_.size(), 4, Xxh3(bytes_)};
  }
  std::unique_ptr<ShardFile> Open() {
    auto sh = OpenShard(path_, kId);
    EXPECT_TRUE(sh.ok()) << sh.status().ToString();
    return sh.ok() ? std::move(sh).value() : nullptr;
  }
  TempDir t_;
  std::string frame_, data_, bytes_, path_;
  std::vector<IndexEntry> entries_;
  std::map<std::string, std::string> content_;
  ShardRef ref_;
};

TEST_F(ShardTest, OpenReadsHeaderFooterAndIndex) {
  auto sh = Open();
  ASSERT_NE(sh, nullptr);
  EXPECT_EQ(sh->path, path_);
  EXPECT_EQ(sh->size, bytes_.size());
  EXPECT_EQ(sh->header.shard_id, 3u);
  EXPECT_EQ(sh->header.dataset_id, kId);
  EXPECT_EQ(sh->footer.entry_count, entries_.size());
  ASSERT_EQ(sh->entries.size(), entries_.size());
  EXPECT_EQ(sh->entries[1].path, "d/alpha");
  EXPECT_EQ(sh->entries[1].offset, kHeaderSize);  // absolute in the file
  EXPECT_EQ(sh->index_stored.size(), sh->footer.index_stored_len);
  EXPECT_TRUE(OpenShard(path_, 0).ok());  // 0: any dataset
}

TEST_F(ShardTest, OpenRefusesAnotherDatasetAMissingFileAndAShortOne) {
  auto other = OpenShard(path_, kId + 1);
  EXPECT_NE(other.status().message().find("another dataset"), std::string::npos)
      << other.status().ToString();
  auto missing = OpenShard(t_.path() + "/none", kId);
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_NE(missing.status().message().find("missing shard"), std::string::npos);
  WriteFile(path_, bytes_.substr(0, kHeaderSize + kFooterSize - 1));
  auto shortened = OpenShard(path_, kId);
  EXPECT_NE(shortened.status().message().find("truncated shard"), std::string::npos);
  auto dir = OpenShard(t_.path(), kId);
  EXPECT_FALSE(dir.ok());
}

TEST_F(ShardTest, HeaderAndFooterMustAgree) {
  std::string b = bytes_;
  const std::string other_header = EncodeHeader({kVersion, 4, kId});
  b.replace(0, kHeaderSize, other_header);
  WriteFile(path_, b);
  auto sh = OpenShard(path_, kId);
  EXPECT_NE(sh.status().message().find("disagree"), std::string::npos) << sh.status().ToString();
}

TEST_F(ShardTest, CheckAgainstManifestComparesSizeThenId) {
  auto sh = Open();
  ASSERT_NE(sh, nullptr);
  EXPECT_TRUE(CheckAgainstManifest(*sh, ref_, 3).ok());
  Status s = CheckAgainstManifest(*sh, ref_, 2);
  EXPECT_NE(s.message().find("holds shard id 3 where the manifest expects 2"), std::string::npos)
      << s.ToString();
  ShardRef longer = ref_;
  longer.bytes++;
  s = CheckAgainstManifest(*sh, longer, 3);
  EXPECT_NE(s.message().find("differs from the manifest"), std::string::npos) << s.ToString();
  EXPECT_TRUE(CheckShardSize("x", 10, ShardRef{"x", 10, 0, 0}).ok());
  EXPECT_TRUE(CheckShardSize("x", 9, ShardRef{"x", 10, 0, 0}).IsCorruption());
}

TEST_F(ShardTest, ReadEntryGivesEachFilesContent) {
  auto sh = Open();
  ASSERT_NE(sh, nullptr);
  FrameDecoder dec;
  for (const auto& e : sh->entries) {
    if (e.type == EntryType::kDir) continue;
    std::string out = "stale";
    ASSERT_TRUE(ReadEntry(*sh, e, &dec, &out).ok()) << e.path;
    EXPECT_EQ(out, content_[e.path]) << e.path;
  }
  IndexEntry past = sh->entries[1];
  past.offset = bytes_.size() - 2;
  std::string out;
  Status s = ReadFrame(sh->fd.get(), sh->path, past, &dec, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find(path_), std::string::npos);
}

TEST_F(ShardTest, ScanHandsEveryFrameOnceAndChecksTheWholeShard) {
  auto sh = Open();
  ASSERT_NE(sh, nullptr);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), new ThreadPool(3)}) {
    std::unique_ptr<ThreadPool> owned(pool);
    std::mutex mu;
    std::map<std::string, int> seen;
    std::atomic<uint64_t> read{0};
    ScanOptions o;
    o.pool = pool;
    o.chunk_bytes = 7;  // tiny chunks: frames span reads
    o.check_file_hash = true;
    o.expect_file_xxh3 = ref_.xxh3;
    o.on_read = [&](uint64_t n) { read += n; };
    DecoderPool decoders(nullptr);
    Status s = ScanShard(*sh, o, [&](const IndexEntry& e, std::string_view stored) {
      std::string_view raw;
      FS_RETURN_IF_ERROR(decoders.Get()->Decode(e, stored, nullptr, &raw));
      std::lock_guard<std::mutex> l(mu);
      EXPECT_EQ(std::string(raw), content_[e.path]) << e.path;
      seen[e.path]++;
      return Status::OK();
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(seen.size(), 4u);  // every file and symlink, never the directory
    for (const auto& [p, n] : seen) EXPECT_EQ(n, 1) << p;
    EXPECT_EQ(read.load(), bytes_.size());

    o.expect_file_xxh3 ^= 1;
    s = ScanShard(*sh, o, [](const IndexEntry&, std::string_view) { return Status::OK(); });
    EXPECT_NE(s.message().find("whole-shard checksum"), std::string::npos) << s.ToString();
  }
}

TEST_F(ShardTest, TheCallbacksFirstErrorEndsTheScanNamingTheShard) {
  auto sh = Open();
  ASSERT_NE(sh, nullptr);
  ScanOptions o;
  Status s = ScanShard(*sh, o, [](const IndexEntry& e, std::string_view) {
    return e.path == "d/big" ? Status::NoSpace("disk full") : Status::OK();
  });
  EXPECT_EQ(s.code(), Status::Code::kNoSpace);
  EXPECT_EQ(s.message(), path_ + ": disk full");
}

TEST_F(ShardTest, ScanShardsStopsWhenCancelled) {
  auto sh = Open();
  ASSERT_NE(sh, nullptr);
  Manifest m = testing::TestManifest(kId);
  m.shards.resize(4);
  m.shards[3] = ref_;
  std::atomic<bool> cancel{true};
  int calls = 0;
  Status s = ScanShards(m, {sh.get()}, nullptr, nullptr, &cancel,
                        [&](const IndexEntry&, std::string_view) {
                          calls++;
                          return Status::OK();
                        });
  EXPECT_EQ(s.code(), Status::Code::kAborted);
  EXPECT_EQ(calls, 0);
  cancel = false;
  s = ScanShards(m, {sh.get()}, nullptr, nullptr, &cancel,
                 [&](const IndexEntry&, std::string_view) {
                   calls++;
                   return Status::OK();
                 });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(calls, 4);
}

}  // namespace
}  // namespace fanstore::format
