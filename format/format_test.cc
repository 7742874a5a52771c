#include "format/format.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include "common/hash.h"
#include "common/xattrs.h"

namespace fanstore::format {
namespace {

IndexEntry File(std::string path, uint64_t off, uint64_t len) {
  IndexEntry e;
  e.path = std::move(path);
  e.mode = 0644;
  e.size = len;
  e.offset = off;
  e.stored_len = len;
  return e;
}

TEST(Format, HeaderRoundTripAndChecks) {
  Header h{kVersion, 7, 0x1234};
  std::string b = EncodeHeader(h);
  ASSERT_EQ(b.size(), kHeaderSize);
  Header out;
  ASSERT_TRUE(DecodeHeader(b, &out).ok());
  EXPECT_EQ(out.shard_id, 7u);
  EXPECT_EQ(out.dataset_id, 0x1234u);
  std::string bad = b;
  bad[0] = 'X';
  Status s = DecodeHeader(bad, &out);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("magic"), std::string::npos);
  bad = b;
  bad[8] = 9;  // version
  s = DecodeHeader(bad, &out);
  EXPECT_NE(s.message().find("version"), std::string::npos);
  EXPECT_FALSE(DecodeHeader(b.substr(0, 10), &out).ok());
  // Datasets of version 1 (before hard links) are still read.
  ASSERT_TRUE(DecodeHeader(EncodeHeader({1, 7, 0x1234}), &out).ok());
  EXPECT_EQ(out.version, 1u);
  EXPECT_FALSE(DecodeHeader(EncodeHeader({0, 7, 0x1234}), &out).ok());
}

TEST(Format, FooterBoundsAreChecked) {
  Footer f;
  f.index_offset = 100;
  f.index_stored_len = 50;
  f.index_raw_len = 2 * EntryFixedSize(kVersion);
  f.entry_count = 2;
  std::string b = EncodeFooter(f);
  ASSERT_EQ(b.size(), kFooterSize);
  Footer out;
  EXPECT_TRUE(DecodeFooter(b, 100 + 50 + kFooterSize, &out).ok());
  EXPECT_FALSE(DecodeFooter(b, 100 + 49 + kFooterSize, &out).ok());  // index runs into footer
  f.index_offset = 10;                                               // inside the header
  EXPECT_FALSE(DecodeFooter(EncodeFooter(f), 10 + 50 + kFooterSize, &out).ok());
  f.index_offset = 100;
  f.entry_count = 1000000;  // absurd for a 96-byte index
  Status s = DecodeFooter(EncodeFooter(f), 100 + 50 + kFooterSize, &out);
  EXPECT_NE(s.message().find("absurd"), std::string::npos);
  f.entry_count = 2;
  f.index_raw_len = uint64_t{1} << 40;
  EXPECT_FALSE(DecodeFooter(EncodeFooter(f), 100 + 50 + kFooterSize, &out).ok());
  std::string bad = EncodeFooter(f);
  bad[60] = 'x';
  EXPECT_FALSE(DecodeFooter(bad, 1000, &out).ok());
}

TEST(Format, IndexRoundTrip) {
  std::vector<IndexEntry> v = {File("a/b.txt", 64, 10), File("c", 74, 0)};
  IndexEntry d;
  d.type = EntryType::kDir;
  d.path = "a";
  d.mode = 0755;
  v.push_back(d);
  std::string raw = EncodeIndexRaw(v);
  auto out = ParseIndexRaw(raw, 200, 3);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].path, "a/b.txt");
  EXPECT_EQ((*out)[2].type, EntryType::kDir);
}

// Version 3 carries ctime, extended attributes and directory sizes; older versions are read
// as before (ctime = mtime, no attributes), in their own, shorter layout.
TEST(Format, Version3AttributesRoundTripAndOlderVersionsStillParse) {
  IndexEntry f = File("a/b.txt", 64, 10);
  f.mtime_ns = 1700000000123456789;
  f.ctime_ns = 1700000001000000007;
  f.xattrs = XattrList(xattrs::Encode({{"user.origin", "imagenet"}, {"user.empty", ""}}));
  IndexEntry d;
  d.type = EntryType::kDir;
  d.path = "a";
  d.mode = 0755;
  d.size = 12288;
  d.ctime_ns = 5;
  auto out = ParseIndexRaw(EncodeIndexRaw({f, d}), 200, 2);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].ctime_ns, f.ctime_ns);
  EXPECT_EQ((*out)[0].Xattrs(), f.Xattrs());
  EXPECT_EQ((*out)[1].size, 12288u);
  EXPECT_EQ((*out)[1].ctime_ns, 5);
  EXPECT_TRUE((*out)[1].Xattrs().empty());
  // A streamed parse, a byte at a time, gives the same.
  IndexParser byte_by_byte(200, 2);
  for (char c : EncodeIndexRaw({f, d})) ASSERT_TRUE(byte_by_byte.Feed({&c, 1}).ok());
  auto streamed = byte_by_byte.Finish();
  ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
  EXPECT_EQ((*streamed)[0].Xattrs(), f.Xattrs());
  for (uint32_t v : {1u, 2u}) {
    d.size = 0;  // older versions have no directory sizes
    auto old = ParseIndexRaw(EncodeIndexRaw({f, d}, v), 200, 2, v);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    EXPECT_EQ((*old)[0].ctime_ns, f.mtime_ns) << "version " << v;
    EXPECT_TRUE((*old)[0].Xattrs().empty());
    d.size = 4096;
    EXPECT_FALSE(ParseIndexRaw(EncodeIndexRaw({f, d}, v), 200, 2, v).ok());
  }
}

TEST(Format, HostileExtendedAttributesAreRefused) {
  auto with = [](std::string enc, EntryType type = EntryType::kFile) {
    IndexEntry e = File("x", 64, 10);
    e.type = type;
    e.xattrs = XattrList(enc);
    return ParseIndexRaw(EncodeIndexRaw({e}), 1000, 1).status();
  };
  EXPECT_TRUE(with(xattrs::Encode({{"user.a", "1"}})).ok());
  // Not the user namespace: a dataset must not bring capabilities, labels or ACLs.
  for (const char* name : {"security.capability", "trusted.x", "system.posix_acl_access", "user."})
    EXPECT_FALSE(with(xattrs::Encode({{name, "v"}})).ok()) << name;
  std::string two = xattrs::Encode({{"user.b", "1"}}) + xattrs::Encode({{"user.a", "1"}});
  EXPECT_FALSE(with(two).ok());  // out of order
  std::string enc = xattrs::Encode({{"user.a", "12345"}});
  EXPECT_FALSE(with(enc.substr(0, enc.size() - 1)).ok());  // runs past its list
  enc[1] = '\xff';                                         // a value length past the list
  EXPECT_FALSE(with(enc).ok());
  EXPECT_FALSE(with(xattrs::Encode({{"user.a", "1"}}), EntryType::kHardLink).ok());
  // A length field far past any list is refused before anything is buffered for it.
  std::string raw = EncodeIndexRaw({File("x", 64, 10)});
  raw[56] = raw[57] = raw[58] = raw[59] = '\x7f';
  IndexParser p(1000, 1);
  Status fed = p.Feed(raw);
  EXPECT_FALSE(fed.ok() && p.Finish().ok());
}

Status ParseOne(const IndexEntry& e, uint64_t data_end = 1000) {
  return ParseIndexRaw(EncodeIndexRaw({e}), data_end, 1).status();
}

TEST(Format, IndexRejectsHostileEntries) {
  EXPECT_TRUE(ParseOne(File("ok", 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File("../etc/passwd", 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File("a/../../x", 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File("/etc/passwd", 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File("a//b", 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File("./a", 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File(std::string("a\0b", 3), 64, 10)).ok());
  EXPECT_FALSE(ParseOne(File("x", 995, 10)).ok());             // past data end
  EXPECT_FALSE(ParseOne(File("x", 10, 10)).ok());              // inside the header
  EXPECT_FALSE(ParseOne(File("x", UINT64_MAX - 2, 10)).ok());  // overflow
  IndexEntry e = File("x", 64, 10);
  e.stored_len = 5;  // raw frame must match size
  EXPECT_FALSE(ParseOne(e).ok());
  e = File("x", 64, 10);
  e.size = uint64_t{1} << 50;
  e.codec = Codec::kZstd;
  EXPECT_FALSE(ParseOne(e).ok());
  e = File("x", 64, 10);
  e.mode = 0100644;  // type bits do not belong in mode
  EXPECT_FALSE(ParseOne(e).ok());
  e = File("x", 64, 10);  // a hard link's data is its file's path, stored raw
  e.type = EntryType::kHardLink;
  EXPECT_TRUE(ParseOne(e).ok());
  e.codec = Codec::kZstd;
  EXPECT_FALSE(ParseOne(e).ok());
  e = File("x", 64, 0);
  e.type = EntryType::kHardLink;
  EXPECT_FALSE(ParseOne(e).ok());  // no target
  std::string raw = EncodeIndexRaw({File("x", 64, 10)});
  raw[0] = 9;  // bad type
  EXPECT_FALSE(ParseIndexRaw(raw, 1000, 1).ok());
  raw = EncodeIndexRaw({File("x", 64, 10)});
  EXPECT_FALSE(ParseIndexRaw(raw, 1000, 2).ok());            // count larger than content
  EXPECT_FALSE(ParseIndexRaw(raw + "zz", 1000, 1).ok());     // trailing bytes
  EXPECT_FALSE(ParseIndexRaw(raw, 1000, 0xffffffffu).ok());  // absurd count
}

TEST(Format, DecodeIndexChecksHashAndSize) {
  std::string raw = EncodeIndexRaw({File("x", 64, 10)});
  std::string stored(ZSTD_compressBound(raw.size()), '\0');
  stored.resize(ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3));
  Footer f;
  f.index_offset = 200;
  f.index_stored_len = stored.size();
  f.index_raw_len = raw.size();
  f.index_xxh3 = Xxh3(stored);
  f.entry_count = 1;
  EXPECT_TRUE(DecodeIndex(stored, f).ok());
  std::string flipped = stored;
  flipped[stored.size() / 2] ^= 1;
  EXPECT_NE(DecodeIndex(flipped, f).status().message().find("checksum"), std::string::npos);
  f.index_raw_len += 1;
  EXPECT_FALSE(DecodeIndex(stored, f).ok());
}

TEST(Format, SymlinkContainment) {
  EXPECT_TRUE(IsContainedLink("a/l", "b"));
  EXPECT_TRUE(IsContainedLink("a/l", "../c"));
  EXPECT_TRUE(IsContainedLink("a/b/l", "../../c"));
  EXPECT_FALSE(IsContainedLink("a/l", "../../c"));
  EXPECT_FALSE(IsContainedLink("l", ".."));
  EXPECT_FALSE(IsContainedLink("l", "/etc/passwd"));
  EXPECT_FALSE(IsContainedLink("a/l", "x/../../../y"));
  EXPECT_FALSE(IsContainedLink("l", ""));
}

}  // namespace
}  // namespace fanstore::format
