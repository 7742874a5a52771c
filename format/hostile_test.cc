// Hostile datasets (issue 14, F6, F7, F16, F17): shards and manifests whose sizes lie, symlink
// chains that leave the root, setuid files. Each case must end in a clear error (or a safe
// result), never a crash, and in bounded memory: the risky call runs in a child process whose
// peak RSS is measured.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/hash.h"
#include "common/io.h"
#include "common/testing/temp_dir.h"
#include "common/thread_pool.h"
#include "format/dataset.h"
#include "format/format.h"
#include "format/manifest.h"
#include "format/shard.h"
#include "pack/pack.h"
#include "stage/stage.h"

namespace fanstore {
namespace {

using format::Codec;
using format::EntryType;
using format::IndexEntry;

#if defined(__SANITIZE_ADDRESS__)
// ASan's shadow memory and quarantine come on top; the point (no allocation from a hostile
// size, which would be GiBs) stands.
constexpr long kRssLimitKb = 192 << 10;
#else
constexpr long kRssLimitKb = 64 << 10;  // 64 MiB
#endif

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

// Runs fn in a child; returns its status message ("" for OK, "CRASH ..." when it died) and its
// peak RSS in KiB.
struct ChildResult {
  std::string message;
  long max_rss_kb = 0;
  bool crashed = false;
};
ChildResult InChild(const std::function<Status()>& fn) {
  int pipefd[2];
  EXPECT_EQ(::pipe(pipefd), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    Status s = fn();
    std::string msg = s.ok() ? "" : s.ToString();
    if (::write(pipefd[1], msg.data(), msg.size()) < 0) _exit(3);
    _exit(s.ok() ? 0 : 1);
  }
  ::close(pipefd[1]);
  ChildResult r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) r.message.append(buf, n);
  ::close(pipefd[0]);
  int status = 0;
  struct rusage ru;
  ::wait4(pid, &status, 0, &ru);
  r.max_rss_kb = ru.ru_maxrss;
  r.crashed = !WIFEXITED(status);
  if (r.crashed) r.message = "CRASH: signal " + std::to_string(WTERMSIG(status));
  return r;
}

// A zstd frame header that claims `content_size` bytes, followed by one empty last block: what
// a liar writes to make a reader allocate.
std::string LyingFrame(uint64_t content_size) {
  std::string f = {'\x28', '\xb5', '\x2f', '\xfd'};
  f.push_back('\xe0');  // 8-byte content size, single segment, no checksum, no dictionary
  for (int i = 0; i < 8; i++) f.push_back(static_cast<char>(content_size >> (8 * i)));
  f += std::string("\x01\x00\x00", 3);  // last block, raw, 0 bytes
  return f;
}

// zstd of `n` zero bytes, compressed as a stream (tiny: a bomb).
std::string ZeroBomb(uint64_t n) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setPledgedSrcSize(c, n);
  std::string zeros(1 << 20, '\0'), out;
  std::string buf(ZSTD_CStreamOutSize(), '\0');
  for (uint64_t done = 0; done < n;) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(zeros.size(), n - done));
    ZSTD_inBuffer ib{zeros.data(), k, 0};
    while (ib.pos < ib.size) {
      ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
      ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_continue);
      out.append(buf.data(), ob.pos);
    }
    done += k;
  }
  size_t left;
  do {
    ZSTD_inBuffer none{nullptr, 0, 0};
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    left = ZSTD_compressStream2(c, &ob, &none, ZSTD_e_end);
    out.append(buf.data(), ob.pos);
  } while (left != 0);
  ZSTD_freeCCtx(c);
  return out;
}

class HostileTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"hostile-test"};
  void SetUp() override {
    base_ = tmp_.path();
    ds_ = base_ + "/ds.fs";
    ::mkdir(ds_.c_str(), 0755);
  }

  // Writes shard 0 with `entries` (frame offsets relative to the data area) over `data`, and a
  // footer whose index fields may be overridden; then a manifest that matches the shard.
  void WriteShard(std::vector<IndexEntry> entries, const std::string& data,
                  const std::function<void(format::Footer*, std::string* stored)>& lie = nullptr) {
    for (auto& e : entries)
      if (e.type != EntryType::kDir) e.offset += format::kHeaderSize;
    std::string raw = format::EncodeIndexRaw(entries);
    std::string stored(ZSTD_compressBound(raw.size()), '\0');
    stored.resize(ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3));
    format::Footer f;
    f.index_offset = format::kHeaderSize + data.size();
    f.index_raw_len = raw.size();
    f.entry_count = static_cast<uint32_t>(entries.size());
    f.dataset_id = kId;
    if (lie) lie(&f, &stored);
    f.index_stored_len = stored.size();
    f.index_xxh3 = Xxh3(stored);
    const std::string shard =
        format::EncodeHeader({format::kVersion, 0, kId}) + data + stored + format::EncodeFooter(f);
    WriteFile(ds_ + "/shard-00000.fsd", shard);
    format::Manifest m;
    m.version = format::kVersion;
    m.tool_version = "test";
    m.created = "2026-01-01T00:00:00Z";
    m.dataset_id = kId;
    m.shards.push_back({"shard-00000.fsd", shard.size(), entries.size(), Xxh3(shard)});
    WriteFile(ds_ + "/manifest.json", format::ManifestToJson(m));
  }
  static IndexEntry Entry(EntryType t, std::string path, uint64_t off = 0, uint64_t stored = 0,
                          uint64_t size = 0, Codec codec = Codec::kRaw, uint64_t xxh3 = 0) {
    IndexEntry e;
    e.type = t;
    e.codec = codec;
    e.mode = t == EntryType::kDir ? 0755 : t == EntryType::kSymlink ? 0777 : 0644;
    e.path = std::move(path);
    e.offset = off;
    e.stored_len = stored;
    e.size = size;
    e.xxh3 = xxh3;
    return e;
  }
  // Opens, verifies, extracts and stages the dataset; the first error.
  Status ReadAll() {
    auto ds = format::Dataset::Open(ds_);
    if (!ds.ok()) return ds.status();
    FS_RETURN_IF_ERROR(format::Verify(**ds, {}));
    FS_RETURN_IF_ERROR(format::Extract(**ds, base_ + "/out", {}));
    return Status::OK();
  }
  Status Stage() {
    auto m = format::LoadManifest(ds_);
    if (!m.ok()) return m.status();
    format::Dictionary dict;
    auto shards = stage::OpenShards(ds_, *m, {0});
    if (!shards.ok()) return shards.status();
    const std::string local = base_ + "/local";
    ::mkdir(local.c_str(), 0700);
    ThreadPool pool(2);
    stage::Options o;
    o.pool = &pool;
    return stage::StageShards(*m, dict, *shards, local, o, nullptr);
  }

  static constexpr uint64_t kId = 0x5eed5eed5eed5eedull;
  std::string base_, ds_;
};

// F6: a file whose frame claims a terabyte made verify allocate it (bad_alloc, no message).
TEST_F(HostileTest, FrameClaimingATerabyteFailsClearlyInBoundedMemory) {
  const std::string frame = LyingFrame(format::kMaxFileSize);
  WriteShard({Entry(EntryType::kFile, "huge", 0, frame.size(), format::kMaxFileSize, Codec::kZstd)},
             frame);
  for (auto fn : {std::function<Status()>([&] { return ReadAll(); }),
                  std::function<Status()>([&] { return Stage(); })}) {
    ChildResult r = InChild(fn);
    EXPECT_FALSE(r.crashed) << r.message;
    EXPECT_NE(r.message.find("shard-00000.fsd"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("'huge'"), std::string::npos) << r.message;
    EXPECT_LT(r.max_rss_kb, kRssLimitKb) << r.message;
  }
}

// F6: a frame that asks for a 128 MiB window (content size unknown) is refused, not allocated.
TEST_F(HostileTest, FrameWithAHugeWindowIsRefused) {
  std::string content(12 << 20, 'a');  // more than a 2^23 window: zstd keeps 2^24
  for (size_t i = 0; i < content.size(); i += 7) content[i] = static_cast<char>(i * 31);
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 27);
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  std::string frame(ZSTD_compressBound(content.size()) + 1024, '\0');
  ZSTD_inBuffer ib{content.data(), content.size(), 0};
  ZSTD_outBuffer ob{frame.data(), frame.size(), 0};
  ASSERT_EQ(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end), 0u);
  ZSTD_freeCCtx(c);
  frame.resize(ob.pos);
  WriteShard({Entry(EntryType::kFile, "wide", 0, frame.size(), content.size(), Codec::kZstd,
                    Xxh3(content))},
             frame);
  ChildResult r = InChild([&] { return ReadAll(); });
  EXPECT_FALSE(r.crashed) << r.message;
  EXPECT_NE(r.message.find("'wide'"), std::string::npos) << r.message;
  EXPECT_LT(r.max_rss_kb, kRssLimitKb) << r.message;
}

// F6: a footer that claims a 512 MiB index made every reader allocate it before decoding.
TEST_F(HostileTest, IndexClaimingHalfAGigabyteFailsInBoundedMemory) {
  const uint64_t claim = 512ull << 20;
  WriteShard({Entry(EntryType::kDir, "d")}, "", [&](format::Footer* f, std::string* stored) {
    *stored = LyingFrame(claim);
    f->index_raw_len = claim;
    f->entry_count = static_cast<uint32_t>(claim / 64);
  });
  ChildResult r = InChild([&] { return ReadAll(); });
  EXPECT_FALSE(r.crashed) << r.message;
  EXPECT_NE(r.message.find("shard-00000.fsd"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("index"), std::string::npos) << r.message;
  EXPECT_LT(r.max_rss_kb, kRssLimitKb) << r.message;
}

// F6: an index that really decompresses to 512 MiB (of zeros) stops at its first bad entry.
TEST_F(HostileTest, IndexBombStopsAtTheFirstEntry) {
  const uint64_t claim = 512ull << 20;
  const std::string bomb = ZeroBomb(claim);
  WriteShard({Entry(EntryType::kDir, "d")}, "", [&](format::Footer* f, std::string* stored) {
    *stored = bomb;
    f->index_raw_len = claim;
    f->entry_count = static_cast<uint32_t>(claim / 64);
  });
  ChildResult r = InChild([&] { return Stage(); });
  EXPECT_FALSE(r.crashed) << r.message;
  EXPECT_NE(r.message.find("index entry 0"), std::string::npos) << r.message;
  EXPECT_LT(r.max_rss_kb, kRssLimitKb) << r.message;
}

// F6: counts beyond the limits are refused by the footer check, naming the field.
TEST_F(HostileTest, AbsurdEntryCountIsNamed) {
  WriteShard({Entry(EntryType::kDir, "d")}, "", [&](format::Footer* f, std::string*) {
    f->entry_count = format::kMaxEntries + 1;
    f->index_raw_len = uint64_t{f->entry_count} * 48;
  });
  ChildResult r = InChild([&] { return ReadAll(); });
  EXPECT_FALSE(r.crashed) << r.message;
  EXPECT_NE(r.message.find("entry count"), std::string::npos) << r.message;
}

// F6: manifests that are too large, too deep or hold too many values are refused before the
// parser builds them.
TEST_F(HostileTest, HostileManifestsAreRefusedInBoundedMemory) {
  WriteShard({Entry(EntryType::kDir, "d")}, "");
  const std::string path = ds_ + "/manifest.json";
  struct Case {
    std::function<void()> make;
    const char* expect;
  };
  std::vector<Case> cases = {
      {[&] { ASSERT_EQ(::truncate(path.c_str(), (200ll << 20)), 0); }, "too large"},
      {[&] {
         std::string s = "[";
         for (int i = 0; i < 12000000; i++) s += "0,";
         s += "0]";
         WriteFile(path, s);
       },
       "values"},
      {[&] { WriteFile(path, std::string(100000, '[') + std::string(100000, ']')); }, "nested"},
  };
  for (auto& c : cases) {
    c.make();
    ChildResult r = InChild([&] { return ReadAll(); });
    EXPECT_FALSE(r.crashed) << r.message;
    EXPECT_NE(r.message.find("manifest.json"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find(c.expect), std::string::npos) << r.message;
    EXPECT_LT(r.max_rss_kb, kRssLimitKb) << c.expect << ": " << r.message;
  }
  // A dictionary larger than a reader accepts.
  auto m =
      format::ManifestFromJson(R"({"format":"fanstore","version":1,"tool_version":"t","created":"c",
    "dataset_id":"0000000000000001","files":0,"dirs":0,"symlinks":0,"raw_bytes":0,"stored_bytes":0,
    "codec":"zstd","level":3,"dict":{"file":"dict.zstd","bytes":999999999,"xxh3":"0000000000000000","id":1},
    "shards":[{"file":"s","bytes":1,"files":0,"xxh3":"0000000000000000"}]})");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("dict"), std::string::npos) << m.status().ToString();
}

// F16: every link of the chain is contained on its own, but x/esc -> up/../.. (x/up -> .)
// leaves the root. Open (and so verify, ls, cat, extract) refuses the dataset.
TEST_F(HostileTest, SymlinkChainLeavingTheRootIsRejected) {
  const std::string data = std::string(".") + "up/../..";
  WriteShard({Entry(EntryType::kDir, "x"),
              Entry(EntryType::kSymlink, "x/up", 0, 1, 1, Codec::kRaw, Xxh3(".")),
              Entry(EntryType::kSymlink, "x/esc", 1, 8, 8, Codec::kRaw, Xxh3("up/../.."))},
             data);
  ChildResult r = InChild([&] { return ReadAll(); });
  EXPECT_FALSE(r.crashed) << r.message;
  EXPECT_NE(r.message.find("symlink 'x/esc'"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("outside the dataset"), std::string::npos) << r.message;
  struct stat st;
  EXPECT_NE(::lstat((base_ + "/out/x/esc").c_str(), &st), 0);
}

TEST(LinkStaysInside, ResolvesThroughOtherLinks) {
  // x/ (dir), x/up -> ., x/deep -> up/up/up, y/ (dir)
  const format::LookupFn ns = [](const std::string& p, std::string* t) {
    if (p == "x" || p == "y") return format::NodeKind::kDir;
    if (p == "x/up") return *t = ".", format::NodeKind::kLink;
    if (p == "x/deep") return *t = "up/up/up", format::NodeKind::kLink;
    if (p == "x/loop") return *t = "loop/a", format::NodeKind::kLink;
    return format::NodeKind::kOther;
  };
  EXPECT_TRUE(format::LinkStaysInside("x/up", ".", ns));
  EXPECT_TRUE(format::LinkStaysInside("x/ok", "up/../y", ns));
  EXPECT_FALSE(format::LinkStaysInside("x/esc", "up/../..", ns));
  EXPECT_FALSE(format::LinkStaysInside("x/esc2", "deep/../../z", ns));
  EXPECT_TRUE(format::LinkStaysInside("x/l", "loop/b", ns));         // ELOOP: resolves to nothing
  EXPECT_TRUE(format::LinkStaysInside("x/f", "missing/../..", ns));  // ENOENT stops the walk
  EXPECT_FALSE(format::LinkStaysInside("x/abs", "/etc", ns));
}

// F16 at pack time: the escaping link of a chain is skipped with a warning; the others stay.
TEST_F(HostileTest, PackSkipsALinkThatEscapesThroughAnother) {
  const std::string src = base_ + "/src";
  ::mkdir(src.c_str(), 0755);
  ::mkdir((src + "/x").c_str(), 0755);
  ::mkdir((src + "/y").c_str(), 0755);
  ASSERT_EQ(::symlink(".", (src + "/x/up").c_str()), 0);
  ASSERT_EQ(::symlink("up/../..", (src + "/x/esc").c_str()), 0);
  ASSERT_EQ(::symlink("up/../y", (src + "/x/ok").c_str()), 0);
  pack::Options o;
  o.sync = false;
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& w) { warnings.push_back(w); };
  ASSERT_TRUE(pack::Pack(src, base_ + "/p.fs", o, nullptr).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("x/esc"), std::string::npos) << warnings[0];
  auto ds = format::Dataset::Open(base_ + "/p.fs");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->Find("x/esc"), nullptr);
  EXPECT_NE((*ds)->Find("x/ok"), nullptr);
  EXPECT_NE((*ds)->Find("x/up"), nullptr);
}

// F17: extract never recreates setuid or setgid files (nor sticky ones).
TEST_F(HostileTest, ExtractStripsSetuidAndSetgid) {
  const std::string src = base_ + "/src";
  ::mkdir(src.c_str(), 0755);
  ::mkdir((src + "/d").c_str(), 0755);
  WriteFile(src + "/d/tool", "#!/bin/sh\n");
  ASSERT_EQ(::chmod((src + "/d/tool").c_str(), 06755), 0);
  ASSERT_EQ(::chmod((src + "/d").c_str(), 02755), 0);
  pack::Options o;
  o.sync = false;
  ASSERT_TRUE(pack::Pack(src, base_ + "/p.fs", o, nullptr).ok());
  auto ds = format::Dataset::Open(base_ + "/p.fs");
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->Find("d/tool")->mode, 06755u);  // the dataset records it faithfully
  ASSERT_TRUE(format::Extract(**ds, base_ + "/out", {}).ok());
  struct stat st;
  ASSERT_EQ(::stat((base_ + "/out/d/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((base_ + "/out/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u);
}

}  // namespace
}  // namespace fanstore
