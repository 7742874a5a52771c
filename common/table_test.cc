// The view: lookups, children, stat fields, extended attributes, the agent's liveness, and the
// checks of a corrupt image. Images come from the builder.
#include "common/table.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/table_builder.h"
#include "common/testing/temp_dir.h"
#include "common/xattrs.h"

namespace fanstore::table {
namespace {

std::vector<Node> Sample() {
  return {
      {"a", S_IFDIR | 0755, 0, 1000, 0, {}},
      {"a/x.txt", S_IFREG | 0644, 12, 2000000001, kLocal, {}},
      {"a/b/y.bin", S_IFREG | 0600, 5, 3, kLocal, {}},
      {"empty", S_IFDIR | 0700, 0, 4, 0, {}},
      {"link", S_IFLNK | 0777, 0, 5, 0, "a/b"},
      {"dangling", S_IFLNK | 0777, 0, 5, 0, "nowhere"},
      {"loop", S_IFLNK | 0777, 0, 5, 0, "loop"},
  };
}

class TableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BuildOptions o;
    o.local_root = "/tmp/local";
    o.dev = 77;
    o.uid = 1000;
    auto img = Build(Sample(), o);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    image_ = std::move(img).value();
    ASSERT_TRUE(view_.Attach(image_).ok());
  }
  std::string image_;
  TableView view_;
};

TEST_F(TableTest, RootAndImplicitParents) {
  // a, a/x.txt, a/b (implicit), a/b/y.bin, empty, link, dangling, loop, root
  EXPECT_EQ(view_.size(), 9u);
  EXPECT_EQ(view_.Path(view_.at(0)), "");
  const Entry* b = view_.Lookup("a/b");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(IsDir(*b));
  EXPECT_EQ(view_.LocalRoot(), "/tmp/local");
}

TEST_F(TableTest, ChildrenSortedByNameWithSubdirCount) {
  const Entry* a = view_.Lookup("a");
  ASSERT_NE(a, nullptr);
  auto kids = view_.Children(*a);
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(view_.Name(view_.at(kids[0])), "b");
  EXPECT_EQ(view_.Name(view_.at(kids[1])), "x.txt");
  struct stat st;
  view_.FillStat(*a, &st);
  EXPECT_EQ(st.st_nlink, 3u);
  EXPECT_EQ(view_.Children(view_.at(0)).size(), 5u);
}

TEST_F(TableTest, StatFieldsAndStableInode) {
  const Entry* x = view_.Lookup("a/x.txt");
  ASSERT_NE(x, nullptr);
  struct stat st;
  view_.FillStat(*x, &st);
  EXPECT_EQ(st.st_size, 12);
  EXPECT_EQ(st.st_blocks, 8);
  EXPECT_EQ(st.st_dev, 77u);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_mtim.tv_sec, 2);
  EXPECT_EQ(st.st_mtim.tv_nsec, 1);
  EXPECT_EQ(st.st_ino, InodeFor(x->hash));
  EXPECT_NE(st.st_ino, 0u);
}

// Version 4: ctime as packed, directory sizes as packed (4096 when unknown), extended
// attributes by entry (a hard link has its file's).
TEST(TableView, CtimeDirectorySizesAndExtendedAttributes) {
  const std::string fx = xattrs::Encode({{"user.label", "n01440764"}});
  const std::string dx = xattrs::Encode({{"user.d", ""}});
  std::vector<Node> nodes = {
      {"d", S_IFDIR | 0755, 12288, 1000, 0, {}}, {"d/f", S_IFREG | 0644, 3, 2000, 0, {}},
      {"d/g", S_IFREG | 0644, 3, 2000, 0, {}},   {"d/h", S_IFREG | 0644, 0, 0, 0, {}},
      {"e", S_IFDIR | 0755, 0, 1000, 0, {}},
  };
  nodes[0].text = dx;
  nodes[1].ctime_ns = 3000000000;
  nodes[1].text = fx;
  nodes[3].hardlink = true;
  nodes[3].text = "d/f";
  auto img = Build(nodes, BuildOptions{});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  TableView v;
  ASSERT_TRUE(v.Attach(*img).ok());
  struct stat st;
  v.FillStat(*v.Lookup("d"), &st);
  EXPECT_EQ(st.st_size, 12288);
  EXPECT_EQ(st.st_blocks, 24);
  v.FillStat(*v.Lookup("e"), &st);
  EXPECT_EQ(st.st_size, 4096);
  v.FillStat(*v.Lookup("d/f"), &st);
  EXPECT_EQ(st.st_ctim.tv_sec, 3);
  EXPECT_EQ(st.st_mtim.tv_nsec, 2000);
  v.FillStat(*v.Lookup("d/g"), &st);
  EXPECT_EQ(st.st_ctim.tv_nsec, 2000);  // none given: the mtime
  EXPECT_EQ(v.Xattrs(*v.Lookup("d/f")), fx);
  EXPECT_EQ(v.Xattrs(*v.Lookup("d/h")), fx);
  EXPECT_EQ(v.Xattrs(*v.Lookup("d")), dx);
  EXPECT_TRUE(v.Xattrs(*v.Lookup("d/g")).empty());
  EXPECT_TRUE(v.Xattrs(*v.Lookup("")).empty());
  EXPECT_EQ(v.Ino(*v.Lookup("d/h")), v.Ino(*v.Lookup("d/f")));
  // A reference outside the strings is corruption.
  std::string bad = *img;
  auto* h = reinterpret_cast<Header*>(bad.data());
  auto* refs = reinterpret_cast<XattrRef*>(bad.data() + h->xattrs_off);
  ASSERT_EQ(h->xattr_count, 2u);
  refs[1].len = 0xffffffffu;
  TableView checked;
  EXPECT_FALSE(checked.Attach(bad).ok());
}

TEST(TableLock, AgentAliveFollowsTheLockHolder) {
  auto img = Build({{"f", S_IFREG | 0644, 1, 0, 0, {}}}, {});
  ASSERT_TRUE(img.ok());
  test::TempDir tmp("table-test");
  const std::string path = tmp.path() + "/table";
  ASSERT_TRUE(WriteFile(path, *img).ok());
  TableView v;
  ASSERT_TRUE(v.Open(path).ok());
  EXPECT_FALSE(v.AgentAlive());
  {
    AgentLock lock;
    ASSERT_TRUE(lock.Acquire(path).ok());
    EXPECT_TRUE(v.AgentAlive());
  }
  EXPECT_FALSE(v.AgentAlive());  // clean shutdown
  pid_t child = ::fork();
  if (child == 0) {
    AgentLock lock;
    if (!lock.Acquire(path).ok()) ::_exit(1);
    ::kill(::getpid(), SIGKILL);  // dies holding the lock
  }
  int ws;
  ASSERT_EQ(::waitpid(child, &ws, 0), child);
  EXPECT_TRUE(WIFSIGNALED(ws));
  EXPECT_FALSE(v.AgentAlive());
}

// The tag lets a probe pass over another path's slot without its entry; a slot whose tag
// matches by chance is still decided by the entry's hash and path.
TEST(TableProbe, TagsDecideWhichEntriesAreLoaded) {
  const char strings[] = "ab";
  const uint64_t same_tag_a = 0x1234567800000003ULL, same_tag_b = 0x1234567800000005ULL;
  Entry entries[2] = {};
  entries[0].hash = same_tag_a;
  entries[0].path_off = 0;
  entries[0].path_len = 1;
  entries[1].hash = same_tag_b;
  entries[1].path_off = 1;
  entries[1].path_len = 1;
  // Both hashes start at slot 0 of 4 (their low halves are small); "a" first, "b" after it.
  Bucket buckets[4] = {
      {0, 0, Tag(same_tag_a)}, {1, 1, Tag(same_tag_b)}, {kNone, 0, 0}, {kNone, 0, 0}};
  ASSERT_EQ(Slot(same_tag_a, 4), 0u);
  ASSERT_EQ(Slot(same_tag_b, 4), 0u);
  EXPECT_EQ(Probe(buckets, 4, entries, strings, "a", same_tag_a), 0u);
  EXPECT_EQ(Probe(buckets, 4, entries, strings, "b", same_tag_b), 1u);  // same tag, other path
  // Another tag never loads an entry: one that would match is not found through a wrong tag.
  buckets[1].tag ^= 1;
  EXPECT_EQ(Probe(buckets, 4, entries, strings, "b", same_tag_b), kNone);
  // The same hash's tag but another path: not found.
  EXPECT_EQ(Probe(buckets, 4, entries, strings, "c", same_tag_a), kNone);
}

TEST(TableView, RejectsCorruptImage) {
  auto img = Build({{"f", S_IFREG | 0644, 1, 0, 0, {}}}, {});
  ASSERT_TRUE(img.ok());
  std::string bad = img.value();
  bad[0] = 'X';
  TableView v;
  EXPECT_FALSE(v.Attach(bad).ok());
  bad = img.value();
  reinterpret_cast<Header*>(bad.data())->entry_count = 1000000;
  EXPECT_FALSE(v.Attach(bad).ok());
  EXPECT_FALSE(v.Attach(std::string_view(img.value()).substr(0, 10)).ok());
  // A slot that names a missing entry, or another path or hash than its entry's.
  const Header& h = *reinterpret_cast<const Header*>(img.value().data());
  ASSERT_GT(h.bucket_count, h.entry_count);
  for (int field = 0; field < 3; field++) {
    bad = img.value();
    auto* slots = reinterpret_cast<Bucket*>(bad.data() + h.buckets_off);
    Bucket* used = nullptr;
    for (uint32_t i = 0; i < h.bucket_count && !used; i++)
      if (slots[i].entry != kNone) used = &slots[i];
    ASSERT_NE(used, nullptr);
    if (field == 0)
      used->entry = h.entry_count;
    else if (field == 1)
      used->path_off += 1;
    else
      used->tag ^= 1;
    EXPECT_FALSE(v.Attach(bad).ok()) << "field " << field;
  }
  ASSERT_TRUE(v.Attach(img.value()).ok());
  EXPECT_NE(v.Lookup("f"), nullptr);
  EXPECT_EQ(v.Lookup("g"), nullptr);
}

}  // namespace
}  // namespace fanstore::table
