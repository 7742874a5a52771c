// The metadata exchange's message: round trips through Encode and Decode on real shards, and
// every way a peer's message can be wrong is refused with a message that names it.
#include "agent/exchange.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "format/manifest.h"
#include "pack/pack.h"
#include "stage/stage.h"

namespace fanstore::agent::exchange {
namespace {

using format::ShardFile;

class ExchangeTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"exchange-test"};
  void SetUp() override {
    dir_ = tmp_.path();
    const std::string src = dir_ + "/src";
    ASSERT_EQ(::mkdir(src.c_str(), 0700), 0);
    for (int d = 0; d < 4; d++) {
      const std::string sub = src + "/d" + std::to_string(d);
      ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
      for (int f = 0; f < 20; f++)
        std::ofstream(sub + "/f" + std::to_string(f)) << std::string(300 + f * 50, 'a' + d);
    }
    ASSERT_EQ(::symlink("d0/f1", (src + "/link").c_str()), 0);
    pack::Options po;
    po.shard_size = 8 << 10;  // several shards
    po.sync = false;
    pack::Stats ps;
    ASSERT_TRUE(pack::Pack(src, dir_ + "/ds.fs", po, &ps).ok());
    auto m = format::LoadManifest(dir_ + "/ds.fs");
    ASSERT_TRUE(m.ok());
    manifest_ = std::move(m).value();
    ASSERT_GE(manifest_.shards.size(), 3u);
    ASSERT_TRUE(dict_.Load(dir_ + "/ds.fs", manifest_.dict).ok());
    std::vector<uint32_t> ids;
    for (uint32_t s = 0; s < manifest_.shards.size(); s++) ids.push_back(s);
    auto sh = stage::OpenShards(dir_ + "/ds.fs", manifest_, ids);
    ASSERT_TRUE(sh.ok()) << sh.status().ToString();
    shards_ = std::move(sh).value();
  }

  uint32_t nshards() const { return static_cast<uint32_t>(shards_.size()); }
  // The message of an agent publishing the shards with ids in [from, to), with their links
  // read as the agent reads them.
  std::string Message(const std::string& endpoint, uint32_t from, uint32_t to) {
    format::FrameDecoder dec(&dict_);
    links_.resize(nshards());
    std::vector<Published> pub;
    for (uint32_t s = from; s < to; s++) {
      links_[s].clear();
      for (const auto& e : shards_[s]->entries) {
        if (e.type != format::EntryType::kSymlink) continue;
        std::string target;
        EXPECT_TRUE(format::ReadEntry(*shards_[s], e, &dec, &target).ok());
        links_[s].emplace_back(e.path, target);
      }
      pub.push_back({shards_[s].get(), &links_[s]});
    }
    return Encode(endpoint, pub);
  }
  // The shards with ids in [from, to).
  std::vector<const ShardFile*> Range(uint32_t from, uint32_t to) const {
    std::vector<const ShardFile*> out;
    for (uint32_t s = from; s < to; s++) out.push_back(shards_[s].get());
    return out;
  }
  // Rank 0 publishes the first shard, rank 1 the rest.
  std::vector<std::string> TwoRanks() {
    return {Message("10.0.0.1:7000", 0, 1), Message("10.0.0.2:7000", 1, nshards())};
  }

  std::string dir_;
  format::Manifest manifest_;
  format::Dictionary dict_;
  std::vector<std::unique_ptr<ShardFile>> shards_;
  std::vector<Links> links_;  // by shard
};

TEST_F(ExchangeTest, RoundTripGivesEveryIndexLinkAndEndpoint) {
  auto all = TwoRanks();
  auto d = Decode(all, nshards(), /*self=*/0, Range(0, 1));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->index.size(), nshards());
  size_t files = 0;
  for (uint32_t s = 0; s < nshards(); s++) {
    size_t i = 0;
    const auto& want = shards_[s]->entries;
    Status st = format::ForEachIndexEntry(d->index[s].stored, d->index[s].footer,
                                          [&](const format::IndexEntry& e) {
                                            EXPECT_LT(i, want.size());
                                            if (i >= want.size()) return Status::OK();
                                            EXPECT_EQ(e.path, want[i].path);
                                            EXPECT_EQ(e.size, want[i].size);
                                            EXPECT_EQ(e.xxh3, want[i].xxh3);
                                            files += e.type == format::EntryType::kFile;
                                            i++;
                                            return Status::OK();
                                          });
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(i, want.size());
  }
  EXPECT_EQ(files, 80u);
  ASSERT_EQ(d->links.size(), 1u);
  EXPECT_EQ(d->links.at("link"), "d0/f1");
  EXPECT_EQ(d->endpoints, (std::vector<std::string>{"10.0.0.1:7000", "10.0.0.2:7000"}));
  EXPECT_EQ(d->bytes, all[0].size() + all[1].size());
}

TEST_F(ExchangeTest, FailedAgentIsNamedWithItsReason) {
  auto all = TwoRanks();
  all[1] = EncodeHead(Status::NoSpace("disk full on node b"));
  auto d = Decode(all, nshards(), 0, Range(0, 1));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("rank 1 failed"), std::string::npos)
      << d.status().ToString();
  EXPECT_NE(d.status().ToString().find("disk full on node b"), std::string::npos);
  EXPECT_TRUE(CheckHead(EncodeHead(Status::OK()), 3).ok());
  EXPECT_FALSE(CheckHead(all[1], 1).ok());
}

TEST_F(ExchangeTest, EveryTruncationIsRefused) {
  auto all = TwoRanks();
  const std::string whole = all[1];
  for (size_t n = 0; n < whole.size(); n += 7) {
    all[1] = whole.substr(0, n);
    EXPECT_FALSE(Decode(all, nshards(), 0, Range(0, 1)).ok()) << "truncated to " << n;
    if (n < 16) {
      EXPECT_FALSE(CheckHead(all[1], 1).ok()) << "head truncated to " << n;
    }
  }
}

TEST_F(ExchangeTest, CorruptRecordsAreRefusedNamingTheShard) {
  auto all = TwoRanks();
  // Rank 1's first record (shard 1) starts after the head (16 B), the endpoint (4 + 13 B) and
  // the record count; then u32 shard, u64 file size, the 64 B footer, u32 length, the index.
  const size_t record = 16 + 4 + 13 + 4, footer = record + 12, index = footer + 64 + 4;
  std::string bad = all[1];
  bad[footer + 3] ^= 0x5a;
  auto d = Decode(std::vector<std::string>{all[0], bad}, nshards(), 0, Range(0, 1));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("metadata exchange: shard 1"), std::string::npos)
      << d.status().ToString();
  // A flipped byte of an index is found where the table is built, which decodes every index
  // against its footer. The result views the messages: they are kept while it is read.
  std::vector<std::string> msgs;
  for (size_t at : {index + 5, index + 40}) {
    msgs = {all[0], all[1]};
    msgs[1][at] ^= 0x5a;
    d = Decode(msgs, nshards(), 0, Range(0, 1));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    Status st = format::ForEachIndexEntry(d->index[1].stored, d->index[1].footer,
                                          [](const format::IndexEntry&) { return Status::OK(); });
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << "flipped byte " << at;
  }
  // For a shard held here, another rank's bytes are not used: ours, with our footer.
  msgs = {all[0], all[1]};
  msgs[1][index + 5] ^= 0x5a;
  d = Decode(msgs, nshards(), 0, Range(0, 2));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index[1].footer.index_xxh3, shards_[1]->footer.index_xxh3);
  EXPECT_EQ(d->index[1].stored.data(), shards_[1]->index_stored.data());
  EXPECT_TRUE(format::ForEachIndexEntry(d->index[1].stored, d->index[1].footer,
                                        [](const format::IndexEntry&) { return Status::OK(); })
                  .ok());
  bad = all[1];
  bad[0] ^= 1;  // the magic
  d = Decode(std::vector<std::string>{all[0], bad}, nshards(), 0, Range(0, 1));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("bad data from rank 1"), std::string::npos);
}

TEST_F(ExchangeTest, ShardPublishedTwiceOrNeverIsRefused) {
  auto twice = Decode(std::vector<std::string>{Message("", 0, 2), Message("", 1, nshards())},
                      nshards(), 0, Range(0, 2));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().ToString().find("bad shard record from rank 1"), std::string::npos);
  auto never = Decode(std::vector<std::string>{Message("", 0, 1), Message("", 2, nshards())},
                      nshards(), 0, Range(0, 1));
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.status().ToString().find("no agent published shard 1"), std::string::npos);
}

TEST_F(ExchangeTest, ShardIdOutOfRangeIsRefused) {
  auto all = TwoRanks();
  auto d = Decode(all, /*nshards=*/1, 0, Range(0, 1));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("bad shard record from rank 1"), std::string::npos);
}

// A large exchange's round one: pointers, whole messages, and failed agents' heads.
TEST_F(ExchangeTest, PointersNameTheirMessagesAndFailuresStillComeThrough) {
  auto all = TwoRanks();
  auto read = ReadPointers({EncodePointer("10.0.0.1:7000", all[0]), all[1]});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_TRUE((*read)[0].has_value());
  EXPECT_FALSE((*read)[1].has_value());  // the message itself
  const Pointer& p = *(*read)[0];
  EXPECT_EQ(p.endpoint, "10.0.0.1:7000");
  EXPECT_EQ(p.size, all[0].size());
  EXPECT_TRUE(p.Matches(all[0]));
  std::string altered = all[0];
  altered[altered.size() / 2] ^= 1;
  EXPECT_FALSE(p.Matches(altered));
  EXPECT_FALSE(p.Matches(all[0] + "x"));

  auto failed = ReadPointers({EncodePointer("", all[0]), EncodeHead(Status::NoSpace("disk full"))});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Status::Code::kAborted);
  EXPECT_NE(failed.status().ToString().find("disk full"), std::string::npos);
  const std::string ptr = EncodePointer("10.0.0.1:7000", all[0]);
  for (size_t n = 4; n < ptr.size(); n++)
    EXPECT_FALSE(ReadPointers({ptr.substr(0, n)}).ok()) << "truncated to " << n;
}

// A symlink leading out of the dataset, lexically or through another link, is refused.
TEST(ExchangeLinks, LinksLeadingOutAreRefused) {
  auto is_dir = [](const std::string& p) { return p == "d" || p == "d/e"; };
  EXPECT_TRUE(CheckLinks({{"d/l", "e"}, {"m", "d/l"}}, is_dir).ok());
  EXPECT_FALSE(CheckLinks({{"d/l", "../../x"}}, is_dir).ok());
  Status st = CheckLinks({{"up", ".."}, {"d/l", "../up/x"}}, is_dir);
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
}

}  // namespace
}  // namespace fanstore::agent::exchange
