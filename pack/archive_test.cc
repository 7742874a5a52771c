// Packing from tar archives: written here with libarchive's writer (names no tar(1) would
// write), packed, then opened, verified and extracted as any dataset.
#include "pack/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "common/io.h"
#include "common/remove_tree.h"
#include "common/testing/temp_dir.h"
#include "common/xattrs.h"
#include "format/dataset.h"
#include "pack/pack.h"

namespace fanstore {
namespace {

using format::Dataset;
using format::EntryType;

struct Member {
  std::string name;
  mode_t type = AE_IFREG;
  std::string data;                                              // file content
  std::string link;                                              // symlink target
  std::string hardlink;                                          // a hard link to this member
  std::vector<std::pair<std::string, std::string>> xattrs = {};  // as pax SCHILY.xattr records
  int64_t ctime = 0;                                             // seconds; 0: none
};
Member F(std::string name, std::string data) {
  return {std::move(name), AE_IFREG, std::move(data), {}, {}};
}
Member D(std::string name) { return {std::move(name), AE_IFDIR, {}, {}, {}}; }
Member L(std::string name, std::string target) {
  return {std::move(name), AE_IFLNK, {}, std::move(target), {}};
}
Member H(std::string name, std::string to) {
  return {std::move(name), AE_IFREG, {}, {}, std::move(to)};
}
Member Fifo(std::string name) { return {std::move(name), AE_IFIFO, {}, {}, {}}; }

// Writes `members` as a tar archive (pax), with `filter` (e.g. ARCHIVE_FILTER_ZSTD).
// Full pax (`full`) also records ctimes and sub-second mtimes.
std::string Tar(const std::vector<Member>& members, int filter = ARCHIVE_FILTER_NONE,
                bool full = false) {
  archive* a = archive_write_new();
  if (full)
    archive_write_set_format_pax(a);
  else
    archive_write_set_format_pax_restricted(a);
  archive_write_add_filter(a, filter);
  std::vector<char> buf(64u << 20);
  size_t used = 0;
  EXPECT_EQ(archive_write_open_memory(a, buf.data(), buf.size(), &used), ARCHIVE_OK);
  for (const auto& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, m.type == AE_IFDIR ? 0750 : 0640);
    archive_entry_set_mtime(e, 1700000000, 5);
    if (!m.link.empty()) archive_entry_set_symlink(e, m.link.c_str());
    if (!m.hardlink.empty()) archive_entry_set_hardlink(e, m.hardlink.c_str());
    for (const auto& [name, value] : m.xattrs)
      archive_entry_xattr_add_entry(e, name.c_str(), value.data(), value.size());
    if (m.ctime) archive_entry_set_ctime(e, m.ctime, 7);
    archive_entry_set_size(
        e, m.type == AE_IFREG && m.hardlink.empty() ? static_cast<int64_t>(m.data.size()) : 0);
    EXPECT_EQ(archive_write_header(a, e), ARCHIVE_OK) << m.name;
    if (!m.data.empty()) archive_write_data(a, m.data.data(), m.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buf.data(), used);
}

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class ArchivePack : public ::testing::Test {
 protected:
  std::string Put(const std::string& name, const std::string& bytes) {
    const std::string p = dir_.path() + "/" + name;
    EXPECT_TRUE(WriteFileAtomic(p, bytes, 0644).ok());
    return p;
  }
  Status PackThem(const std::vector<std::string>& srcs, pack::Options o = {}) {
    warnings_.clear();
    o.warn = [this](const std::string& w) { warnings_.push_back(w); };
    o.sync = false;
    Status s = pack::Pack(srcs, out_, o, &stats_);
    if (s.ok()) {
      auto ds = Dataset::Open(out_);
      if (!ds.ok()) return ds.status();
      ds_ = std::move(ds).value();
      FS_RETURN_IF_ERROR(format::Verify(*ds_, {}));
    }
    return s;
  }
  // Content of a file in the packed dataset, by extracting it.
  std::string Extracted(const std::string& rel) {
    const std::string dest = dir_.path() + "/x";
    if (::access(dest.c_str(), F_OK) != 0) {
      EXPECT_TRUE(format::Extract(*ds_, dest, {}).ok());
    }
    auto s = ReadSmallFile(dest + "/" + rel, 64u << 20);
    EXPECT_TRUE(s.ok()) << rel;
    return s.ok() ? *s : std::string();
  }
  bool Warned(const std::string& part) const {
    for (const auto& w : warnings_)
      if (w.find(part) != std::string::npos) return true;
    return false;
  }

  test::TempDir dir_{"archive"};
  std::string out_ = dir_.path() + "/out.fs";
  pack::Stats stats_;
  std::unique_ptr<Dataset> ds_;
  std::vector<std::string> warnings_;
};

TEST_F(ArchivePack, MembersBecomeTheNamespace) {
  const std::string big = Random(5u << 20, 1) + std::string(3u << 20, 'z');
  const std::string tar =
      Put("t.tar", Tar({D("./"), D("a/"), F("a/x.txt", "hello"),
                        F("a/deep/y.bin", Random(1000, 2)),  // parent a/deep implied
                        F("a/big", big),                     // streamed
                        L("a/ln", "x.txt"), D("empty/"), F("zero", "")}));
  ASSERT_TRUE(PackThem({tar}).ok());
  EXPECT_EQ(stats_.files, 4u);
  EXPECT_EQ(stats_.dirs, 3u);  // a, a/deep, empty
  EXPECT_EQ(stats_.symlinks, 1u);
  EXPECT_EQ(ds_->manifest().root_mode, 0750u);
  const auto* x = ds_->Find("a/x.txt");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->mode, 0640u);
  EXPECT_EQ(x->mtime_ns, 1700000000LL * 1000000000);
  EXPECT_EQ(ds_->Find("a")->mode, 0750u);
  EXPECT_EQ(ds_->Find("a/deep")->mode, 0755u);
  EXPECT_EQ(Extracted("a/big"), big);
  EXPECT_EQ(Extracted("a/x.txt"), "hello");
  EXPECT_EQ(Extracted("zero"), "");
  EXPECT_TRUE(warnings_.empty());
}

// pax ctime and SCHILY.xattr records: the user namespace is kept, others are not.
TEST_F(ArchivePack, CtimeAndUserAttributesAreKept) {
  Member f = F("a/x.txt", "hello");
  f.xattrs = {{"user.label", "n01"}, {"security.capability", "caps"}};
  f.ctime = 1700000100;
  Member d = D("a/");
  d.xattrs = {{"user.dir", "d"}};
  ASSERT_TRUE(
      PackThem({Put("t.tar", Tar({d, f, F("b", "no attributes")}, ARCHIVE_FILTER_NONE, true))})
          .ok());
  const format::IndexEntry* x = ds_->Find("a/x.txt");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->Xattrs(), xattrs::Encode({{"user.label", "n01"}}));
  EXPECT_EQ(x->ctime_ns, 1700000100000000007);
  EXPECT_EQ(ds_->Find("a")->Xattrs(), xattrs::Encode({{"user.dir", "d"}}));
  EXPECT_TRUE(ds_->Find("b")->Xattrs().empty());
  EXPECT_EQ(ds_->Find("b")->ctime_ns, ds_->Find("b")->mtime_ns);  // none in the archive
}

TEST_F(ArchivePack, ArchivesInsideBecomeDirectories) {
  const std::string n1 = Tar({F("n01_1.JPEG", "one"), F("n01_2.JPEG", "two")});
  const std::string n2 = Tar({F("n02_1.JPEG", "three")}, ARCHIVE_FILTER_GZIP);
  const std::string outer = Tar({F("n01.tar", n1), F("sub/n02.tar.gz", n2)});
  const std::string tar = Put("train.tar", outer);
  ASSERT_TRUE(PackThem({tar}).ok());
  EXPECT_EQ(stats_.files, 3u);
  EXPECT_EQ(Extracted("n01/n01_2.JPEG"), "two");
  EXPECT_EQ(Extracted("sub/n02/n02_1.JPEG"), "three");
  ASSERT_TRUE(RemoveTree(out_).ok());
  pack::Options keep;
  keep.inner_archives = false;
  ASSERT_TRUE(PackThem({tar}, keep).ok());
  EXPECT_EQ(stats_.files, 2u);
  ASSERT_NE(ds_->Find("n01.tar"), nullptr);
}

TEST_F(ArchivePack, SeveralArchivesEachGetADirectory) {
  // WebDataset shards: the same keys in each.
  const std::string a = Put("shard-000.tar", Tar({F("000.jpg", "a"), F("000.cls", "1")}));
  const std::string b = Put("shard-001.tar.zst", Tar({F("000.jpg", "b")}, ARCHIVE_FILTER_ZSTD));
  ASSERT_TRUE(PackThem({a, b}).ok());
  EXPECT_EQ(Extracted("shard-000/000.jpg"), "a");
  EXPECT_EQ(Extracted("shard-001/000.jpg"), "b");
}

TEST_F(ArchivePack, ShardsFillInOrder) {
  std::vector<Member> m;
  for (int i = 0; i < 1000; i++) m.push_back(F("f" + std::to_string(i), Random(100, i)));
  pack::Options o;
  o.shard_files = 300;
  ASSERT_TRUE(PackThem({Put("t.tar", Tar(m))}, o).ok());
  ASSERT_EQ(ds_->shard_count(), 4u);
  EXPECT_EQ(ds_->manifest().shards[0].files, 256u);  // whole batches of 256
  EXPECT_EQ(stats_.files, 1000u);
  EXPECT_EQ(Extracted("f999"), m[999].data);
}

TEST_F(ArchivePack, HostileNamesAndTypes) {
  const std::string tar = Put(
      "t.tar",
      Tar({F("../escape", "x"), F("a/../../up", "x"),
           F("/abs/file", "abs"),  // stored as abs/file, as tar(1) extracts it
           F("./b//./c", "c"), H("hard", "b/c"), H("hard2", "nowhere"), H("hard3", "../etc/passwd"),
           Fifo("fifo"), L("out", "../etc/passwd"), L("absl", "/etc/passwd"), L("b/up", "."),
           L("b/esc", "up/../.."),  // escapes only through b/up
           F(std::string(300, 'n'), "long")}));
  ASSERT_TRUE(PackThem({tar}).ok());
  EXPECT_EQ(Extracted("abs/file"), "abs");
  EXPECT_EQ(Extracted("b/c"), "c");
  EXPECT_EQ(ds_->Find("escape"), nullptr);
  EXPECT_EQ(ds_->Find("up"), nullptr);
  ASSERT_NE(ds_->Find("hard"), nullptr);  // another name of b/c
  EXPECT_EQ(ds_->Find("hard")->type, format::EntryType::kHardLink);
  EXPECT_EQ(ds_->Find("hard2"), nullptr);
  EXPECT_EQ(ds_->Find("hard3"), nullptr);
  EXPECT_EQ(ds_->Find("out"), nullptr);
  EXPECT_EQ(ds_->Find("b/esc"), nullptr);
  EXPECT_NE(ds_->Find("b/up"), nullptr);
  for (const char* w :
       {"../escape", "hard2: a hard link to nowhere, which is not a file", "hard3", "fifo",
        "out -> ../etc/passwd", "absl", "through other symlinks", "too long"})
    EXPECT_TRUE(Warned(w)) << w;
  EXPECT_EQ(stats_.skipped, 9u);
}

TEST_F(ArchivePack, ConflictsAreErrors) {
  struct Case {
    std::vector<Member> members;
    const char* error;
  } cases[] = {
      {{F("a", "1"), F("a", "2")}, "a appears twice"},
      {{D("d/"), F("d", "2")}, "d appears twice"},
      {{F("f", "1"), F("f/g", "2")}, "its parent f is a file"},
      {{L("l", "."), F("l/g", "2")}, "its parent l is a symlink"},
  };
  for (const auto& c : cases) {
    const std::string tar = Put("c.tar", Tar(c.members));
    Status s = PackThem({tar});
    EXPECT_NE(s.message().find(c.error), std::string::npos) << s.ToString();
    EXPECT_NE(::access(out_.c_str(), F_OK), 0);
  }
}

// The set of file paths grows as members come (from 65,536 slots, 70 % full at most): files
// added before it grew are still found after (hard links to them, a second copy, a member under
// one as if it were a directory).
TEST_F(ArchivePack, PathsAreTrackedAcrossTheSetsGrowth) {
  constexpr int kFiles = 100000;  // past the first two growths (Tar() writes at most 64 MiB)
  std::vector<Member> members;
  for (int i = 0; i < kFiles; i++)
    members.push_back(F("d" + std::to_string(i / 1000) + "/f" + std::to_string(i), ""));
  for (int i : {0, 1, 9999, 45000, kFiles - 1})
    members.push_back(
        H("link" + std::to_string(i), "d" + std::to_string(i / 1000) + "/f" + std::to_string(i)));
  ASSERT_TRUE(PackThem({Put("many.tar", Tar(members))}).ok());
  EXPECT_EQ(stats_.files, static_cast<uint64_t>(kFiles));
  for (int i : {0, 1, 9999, 45000, kFiles - 1})
    EXPECT_NE(ds_->Find("link" + std::to_string(i)), nullptr) << i;
  EXPECT_TRUE(warnings_.empty());
  const std::pair<Member, const char*> late[] = {
      {F("d0/f0", "again"), "d0/f0 appears twice"},
      {F("d9/f9999/x", "under a file"), "its parent d9/f9999 is a file"},
  };
  for (const auto& [m, error] : late) {
    std::vector<Member> more = members;
    more.push_back(m);
    ds_.reset();
    ASSERT_TRUE(RemoveTree(out_).ok());
    Status s = PackThem({Put("many.tar", Tar(more))});
    EXPECT_NE(s.message().find(error), std::string::npos) << s.ToString();
  }
}

TEST_F(ArchivePack, DamagedArchivesNameTheCause) {
  std::string whole = Tar({F("first", Random(2000, 3)), F("second", Random(9000, 4))});
  Status s = PackThem({Put("cut.tar", whole.substr(0, 4096))});
  EXPECT_NE(s.message().find("second"), std::string::npos) << s.ToString();
  s = PackThem({Put("junk.tar", Random(10000, 5))});
  EXPECT_NE(s.message().find("is not a tar archive"), std::string::npos) << s.ToString();
  // A member claiming more bytes than the archive holds, large enough to be spooled.
  s = PackThem({Put("claim.tar", Tar({F("huge", Random(6u << 20, 7))}).substr(0, 1u << 20))});
  EXPECT_NE(s.message().find("huge"), std::string::npos) << s.ToString();
  const std::string inner = Put("bad-inner.tar", Tar({F("x.tar", Random(3000, 6))}));
  s = PackThem({inner});
  EXPECT_NE(s.message().find("x.tar is not a tar archive"), std::string::npos) << s.ToString();
  // Nothing is left: no dataset, no temporary directory.
  EXPECT_EQ(std::system(("ls -A " + dir_.path() + " | grep -q out.fs").c_str()) == 0, false);
}

TEST_F(ArchivePack, SourcesAreChecked) {
  const std::string tar = Put("t.tar", Tar({F("a", "1")}));
  EXPECT_NE(PackThem({tar, dir_.path()}).message().find("is a directory"), std::string::npos);
  EXPECT_NE(PackThem({"-", tar}).message().find("packed alone"), std::string::npos);
  EXPECT_NE(PackThem({dir_.path() + "/missing.tar"}).message().find("missing.tar"),
            std::string::npos);
  pack::Options o;
  o.dict = true;
  EXPECT_NE(PackThem({tar}, o).message().find("--dict"), std::string::npos);
  EXPECT_EQ(pack::ArchiveSuffix("x.tar.zst"), 8u);
  EXPECT_EQ(pack::ArchiveSuffix("x.tgz"), 4u);
  EXPECT_EQ(pack::ArchiveSuffix(".tar"), 0u);
  EXPECT_EQ(pack::ArchiveSuffix("x.zip"), 0u);
}

}  // namespace
}  // namespace fanstore
