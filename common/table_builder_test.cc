// The builder: what it adds and refuses, the order of entries, hard links, raw copies, and an
// image built into its file.
#include "common/table_builder.h"

#include <gtest/gtest.h>

#include "common/testing/temp_dir.h"
#include "common/xattrs.h"

namespace fanstore::table {
namespace {

// A hard link is another name of its file: the same inode, attributes and source, a link count
// of 2 under both names, and a table whose every entry checks out.
TEST(TableBuild, HardLinksAreOneFileUnderTwoNames) {
  std::vector<Node> nodes = {
      {"a/f", S_IFREG | 0640, 12, 1000, kLocal, {}, 3, 7},
      {"b/g", S_IFREG | 0644, 0, 0, 0, {}},
  };
  nodes[1].hardlink = true;
  nodes[1].text = "a/f";
  auto img = Build(nodes, BuildOptions{});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  TableView v;
  ASSERT_TRUE(v.Attach(*img).ok());
  const Entry* f = v.Lookup("a/f");
  const Entry* g = v.Lookup("b/g");
  ASSERT_TRUE(f && g);
  EXPECT_EQ(&v.Target(*g), f);
  EXPECT_EQ(&v.Target(*f), f);
  struct stat sf, sg;
  v.FillStat(*f, &sf);
  v.FillStat(*g, &sg);
  EXPECT_EQ(sf.st_ino, sg.st_ino);
  EXPECT_EQ(sg.st_nlink, 2u);
  EXPECT_EQ(sf.st_nlink, 2u);
  EXPECT_EQ(sg.st_mode, S_IFREG | 0640u);
  EXPECT_EQ(sg.st_size, 12);
  uint32_t shard = 0, index = 0;
  ASSERT_TRUE(v.Source(*g, &shard, &index));
  EXPECT_EQ(shard, 3u);
  EXPECT_EQ(index, 7u);
  TableView checked;
  EXPECT_TRUE(checked.Attach(*img).ok());
  // A link to what is not a file of the table is refused.
  nodes[1].text = "a";
  EXPECT_FALSE(Build(nodes, BuildOptions{}).ok());
  nodes[1].text = "nowhere";
  EXPECT_FALSE(Build(nodes, BuildOptions{}).ok());
}

// A kRawCopy file keeps its frame's offset in its shard copy beside its source; no other file
// may carry one.
TEST(TableBuild, RawCopyOffsetBesideTheSource) {
  std::vector<Node> nodes = {{"d/f", S_IFREG | 0644, 5, 0, kRawCopy, {}, 2, 9, 4096},
                             {"d/g", S_IFREG | 0644, 5, 0, 0, {}, 2, 10}};
  auto img = Build(nodes, {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  TableView v;
  ASSERT_TRUE(v.Attach(*img).ok());
  const Entry* f = v.Lookup("d/f");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(RawCopyOffset(*f), 4096u);
  uint32_t shard = 0, index = 0;
  ASSERT_TRUE(v.Source(*f, &shard, &index));
  EXPECT_EQ(shard, 2u);
  EXPECT_EQ(index, 9u);
  EXPECT_TRUE(v.Children(*f).empty());
  EXPECT_EQ(RawCopyOffset(*v.Lookup("d/g")), 0u);
  nodes[1].copy_offset = 8;  // without kRawCopy
  img = Build(nodes, {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  TableView checked;
  EXPECT_FALSE(checked.Attach(*img).ok());
}

TEST(TableBuild, IntoItsFileTheSameImageAsInMemory) {
  const std::vector<Node> nodes = {{"d/f", S_IFREG | 0644, 5, 7, 0, {}},
                                   {"d/l", S_IFLNK | 0777, 0, 7, 0, "f"}};
  auto img = Build(nodes, {});
  ASSERT_TRUE(img.ok());
  test::TempDir tmp("table-test");
  const std::string path = tmp.path() + "/table.tmp";
  FileImage file;
  ASSERT_TRUE(BuildInto(nodes, {}, [&](size_t n) { return file.Create(path, n); }).ok());
  EXPECT_EQ(file.view(), *img);
  TableView v;
  ASSERT_TRUE(v.Open(path).ok());  // what clients map is what the agent wrote in place
  EXPECT_NE(v.Lookup("d/f"), nullptr);
  // A failed allocation fails the build, naming it.
  Status s = BuildInto(nodes, {}, [&](size_t) -> Result<char*> {
    return file.Create(tmp.path() + "/missing/table", 1);
  });
  EXPECT_NE(s.message().find("missing/table"), std::string::npos) << s.ToString();
}

TEST(TableBuild, RejectsBadInput) {
  EXPECT_FALSE(Build({{"../x", S_IFREG, 0, 0, 0, {}}}, {}).ok());
  EXPECT_FALSE(Build({{"/x", S_IFREG, 0, 0, 0, {}}}, {}).ok());
  EXPECT_FALSE(Build({{"x", S_IFREG, 0, 0, 0, {}}, {"x", S_IFREG, 0, 0, 0, {}}}, {}).ok());
  EXPECT_FALSE(Build({{"f", S_IFREG, 0, 0, 0, {}}, {"f/g", S_IFREG, 0, 0, 0, {}}}, {}).ok());
  EXPECT_FALSE(Build({{"", S_IFDIR, 0, 0, 0, {}}, {"", S_IFDIR, 0, 0, 0, {}}}, {}).ok());
}

// Parents nobody gave are added once each, however many nodes share them.
TEST(TableBuild, MissingParentsAreAddedOnce) {
  auto img = Build({{"x/y/z/f1", S_IFREG | 0644, 1, 5, 0, {}},
                    {"x/y/w/f2", S_IFREG | 0644, 1, 6, 0, {}},
                    {"x/y/z/f3", S_IFREG | 0644, 1, 7, 0, {}}},
                   {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  TableView v;
  ASSERT_TRUE(v.Attach(*img).ok());
  EXPECT_EQ(v.size(), 8u);  // the root, 3 files, x, x/y, x/y/w, x/y/z
  for (const char* d : {"x", "x/y", "x/y/w", "x/y/z"}) {
    const Entry* e = v.Lookup(d);
    ASSERT_NE(e, nullptr) << d;
    EXPECT_TRUE(IsDir(*e)) << d;
  }
  EXPECT_EQ(v.Children(*v.Lookup("x/y/z")).size(), 2u);
}

// Entries keep the source's order (entry 0 the root, node k entry k + 1, missing parents
// last); children are sorted by name whatever that order.
TEST(TableBuild, SourceOrderWithChildrenByName) {
  auto img = Build({{"d/z", S_IFREG | 0644, 1, 0, 0, {}},
                    {"d/a", S_IFREG | 0644, 2, 0, 0, {}},
                    {"c", S_IFDIR | 0755, 0, 0, 0, {}},
                    {"", S_IFDIR | 0700, 0, 9, 0, {}}},
                   {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  TableView v;
  ASSERT_TRUE(v.Attach(*img).ok());
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v.at(0).mode, S_IFDIR | 0700u);  // the given root
  EXPECT_EQ(v.Path(v.at(1)), "d/z");
  EXPECT_EQ(v.Path(v.at(2)), "d/a");
  EXPECT_EQ(v.Path(v.at(3)), "c");
  EXPECT_EQ(v.Path(v.at(4)), "d");  // added
  auto kids = v.Children(v.at(4));
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(v.Name(v.at(kids[0])), "a");
  EXPECT_EQ(v.Name(v.at(kids[1])), "z");
  auto top = v.Children(v.at(0));
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(v.Name(v.at(top[0])), "c");
  EXPECT_EQ(v.Name(v.at(top[1])), "d");
}

// A source whose second pass differs from its first fails the build instead of writing past
// what the first pass counted.
TEST(TableBuild, RefusesASourceThatChangesBetweenPasses) {
  class Growing : public NodeSource {
   public:
    Status ForEach(int pass, const NodeFn& fn) const override {
      FS_RETURN_IF_ERROR(fn(Node{"f", S_IFREG | 0644, 1, 0, 0, {}}));
      if (pass == 1) return fn(Node{"a-much-longer-name", S_IFREG | 0644, 1, 0, 0, {}});
      return Status::OK();
    }
  };
  std::string image;
  Status st = BuildInto(Growing(), {}, [&](size_t n) -> Result<char*> {
    image.assign(n, '\0');
    return image.data();
  });
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
}

// A source in parts (as the agent's shards are): walked on several threads, the image is byte
// for byte the one a single walk in order writes, missing parents, hard links, symlinks and
// extended attributes included; a part that changes between the passes is refused as before.
class Parted : public NodeSource {
 public:
  explicit Parted(std::vector<std::vector<Node>> parts) : parts_(std::move(parts)) {}
  size_t Parts() const override { return parts_.size(); }
  Status ForEachIn(size_t p, int pass, const NodeFn& fn) const override {
    for (const Node& nd : parts_[p]) FS_RETURN_IF_ERROR(fn(nd));
    if (pass == 1 && grow_ == p) return fn(Node{"zz/new", S_IFREG | 0644, 1, 0, 0, {}});
    return Status::OK();
  }
  Status ForEach(int pass, const NodeFn& fn) const override {
    for (size_t p = 0; p < parts_.size(); p++) FS_RETURN_IF_ERROR(ForEachIn(p, pass, fn));
    return Status::OK();
  }
  size_t grow_ = SIZE_MAX;

 private:
  std::vector<std::vector<Node>> parts_;
};

TEST(TableBuild, PartsOnManyThreadsMakeTheImageOfOneWalk) {
  std::vector<std::string> paths;  // kept alive for the nodes' views
  const std::string xattrs_enc = xattrs::Encode({{"user.k", "v"}});
  std::vector<std::vector<Node>> parts(7);
  for (int p = 0; p < 7; p++) {
    for (int i = 0; i < 300; i++) {
      paths.push_back("c" + std::to_string((p * 300 + i) % 23) + "/d" + std::to_string(i % 5) +
                      "/p" + std::to_string(p) + "f" + std::to_string(i));
    }
  }
  size_t k = 0;
  for (int p = 0; p < 7; p++)
    for (int i = 0; i < 300; i++, k++) {
      Node nd{paths[k], S_IFREG | 0644, static_cast<uint64_t>(i), 1000 + p * 7 + i, 0, {}};
      nd.source_shard = static_cast<uint32_t>(p);
      nd.source_index = static_cast<uint32_t>(i);
      if (i % 50 == 1) nd.text = xattrs_enc;  // extended attributes
      parts[p].push_back(nd);
    }
  parts[2].push_back(Node{"c1", S_IFDIR | 0750, 0, 77, 0, {}});  // a given directory
  Node link{"c2/l", S_IFLNK | 0777, 0, 0, 0, "d0"};
  parts[3].push_back(link);
  Node hard{"c3/h", S_IFREG | 0644, 0, 0, 0, paths[5]};
  hard.hardlink = true;
  parts[5].push_back(hard);
  auto build = [&](const Parted& src, size_t threads) -> Result<std::string> {
    std::string image;
    BuildOptions o;
    o.local_root = "/l";
    o.threads = threads;
    Status st = BuildInto(src, o, [&](size_t n) -> Result<char*> {
      image.assign(n, '\0');
      return image.data();
    });
    if (!st.ok()) return st;
    return image;
  };
  Parted src(parts);
  auto one = build(src, 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  for (size_t threads : {2, 3, 8}) {
    auto many = build(src, threads);
    ASSERT_TRUE(many.ok()) << many.status().ToString();
    EXPECT_TRUE(*many == *one) << threads << " threads";
  }
  TableView v;
  ASSERT_TRUE(v.Attach(*one).ok());
  ASSERT_NE(v.Lookup(paths[1234]), nullptr);
  EXPECT_EQ(v.Target(*v.Lookup("c3/h")).size, v.Lookup(paths[5])->size);
  src.grow_ = 4;
  EXPECT_EQ(build(src, 3).status().code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace fanstore::table
