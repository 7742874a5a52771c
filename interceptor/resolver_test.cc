#include "interceptor/resolver.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/table_builder.h"

namespace fanstore::interceptor {
namespace {

using table::Node;

class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<Node> nodes = {
        {"a", S_IFDIR | 0755, 0, 1, 0, {}},
        {"a/x.txt", S_IFREG | 0644, 12, 2, table::kLocal, {}},
        {"a/b/y.bin", S_IFREG | 0600, 5, 3, table::kLocal, {}},
        {"empty", S_IFDIR | 0700, 0, 4, 0, {}},
        {"link", S_IFLNK | 0777, 0, 5, 0, "a/b"},
        {"a/up", S_IFLNK | 0777, 0, 5, 0, "../empty"},
        {"dangling", S_IFLNK | 0777, 0, 5, 0, "nowhere"},
        {"loop", S_IFLNK | 0777, 0, 5, 0, "loop"},
        {"abs", S_IFLNK | 0777, 0, 5, 0, "/etc"},
        {"h\xc3\xa9llo w\xc3\xb6rld", S_IFREG | 0644, 1, 6, 0, {}},
    };
    auto img = table::Build(nodes, {});
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    image_ = std::move(img).value();
    ASSERT_TRUE(view_.Attach(image_).ok());
  }

  Walk Go(std::string_view rel, bool follow = true, const char* mount = "/fanstore/ds",
          std::string_view start = "") {
    Resolver r(&view_, mount);
    const table::Entry* s = view_.Lookup(start);
    EXPECT_NE(s, nullptr);
    out_[0] = '\0';
    return r.Resolve(*s, rel, follow, out_);
  }
  std::string PathOf(const Walk& w) {
    return w.entry ? std::string(view_.Path(*w.entry)) : "<null>";
  }

  std::string image_;
  table::TableView view_;
  char out_[PATH_MAX];
};

TEST_F(ResolverTest, CanonicalAndEmpty) {
  Walk w = Go("a/x.txt");
  ASSERT_EQ(w.err, 0);
  EXPECT_EQ(PathOf(w), "a/x.txt");
  w = Go("");
  ASSERT_EQ(w.err, 0);
  EXPECT_EQ(PathOf(w), "");
  EXPECT_EQ(w.last, LastKind::kNone);
  w = Go("/a//b/");  // leading, doubled and trailing slashes
  ASSERT_EQ(w.err, 0);
  EXPECT_EQ(PathOf(w), "a/b");
  EXPECT_TRUE(w.trailing_slash);
  w = Go("h\xc3\xa9llo w\xc3\xb6rld");
  ASSERT_EQ(w.err, 0);
}

TEST_F(ResolverTest, DotAndDotDotArePhysical) {
  EXPECT_EQ(PathOf(Go("a/./b/../x.txt")), "a/x.txt");
  // link -> a/b, so link/.. is a, not the root.
  EXPECT_EQ(PathOf(Go("link/..")), "a");
  EXPECT_EQ(PathOf(Go("a/up")), "empty");
  EXPECT_EQ(Go("a/.").last, LastKind::kDot);
  EXPECT_EQ(Go("a/b/..").last, LastKind::kDotDot);
}

TEST_F(ResolverTest, SymlinksFollowedOrNot) {
  EXPECT_EQ(PathOf(Go("link/y.bin")), "a/b/y.bin");
  EXPECT_EQ(PathOf(Go("link", false)), "link");
  EXPECT_EQ(PathOf(Go("link", true)), "a/b");
  EXPECT_EQ(PathOf(Go("link/", false)), "a/b");  // a trailing slash follows
  EXPECT_EQ(Go("dangling", true).err, ENOENT);
  EXPECT_EQ(Go("dangling", false).err, 0);
  EXPECT_EQ(Go("loop", true).err, ELOOP);
  EXPECT_EQ(Go("loop/x", false).err, ELOOP);
}

TEST_F(ResolverTest, Errors) {
  Walk w = Go("nope");
  EXPECT_EQ(w.err, ENOENT);
  ASSERT_NE(w.parent, nullptr);
  EXPECT_EQ(view_.Path(*w.parent), "");
  w = Go("a/nope/");
  EXPECT_EQ(w.err, ENOENT);
  ASSERT_NE(w.parent, nullptr);
  EXPECT_EQ(view_.Path(*w.parent), "a");
  EXPECT_TRUE(w.trailing_slash);
  w = Go("nope/x");
  EXPECT_EQ(w.err, ENOENT);
  EXPECT_EQ(w.parent, nullptr);
  EXPECT_EQ(Go("a/x.txt/").err, ENOTDIR);
  EXPECT_EQ(Go("a/x.txt/z").err, ENOTDIR);
  EXPECT_EQ(Go("a/x.txt/.").err, ENOTDIR);
  EXPECT_EQ(Go(std::string(300, 'n')).err, ENAMETOOLONG);
}

TEST_F(ResolverTest, EscapesAboveTheMount) {
  Walk w = Go("..");
  EXPECT_TRUE(w.escaped);
  EXPECT_STREQ(out_, "/fanstore");
  w = Go("a/../../other/x");
  EXPECT_TRUE(w.escaped);
  EXPECT_STREQ(out_, "/fanstore/other/x");
  w = Go("../ds/a", true, "/fanstore/ds");
  EXPECT_STREQ(out_, "/fanstore/ds/a");  // the caller locates it again: back inside
  w = Go("..", true, "/ds");
  EXPECT_STREQ(out_, "/");
  w = Go("../x/", true, "/ds");
  EXPECT_STREQ(out_, "/x/");
  // A symlink's target never leaves the mount (EXDEV), even when the caller's own ".." may.
  w = Go("abs/passwd");
  EXPECT_FALSE(w.escaped);
  EXPECT_EQ(w.err, EXDEV);
  EXPECT_FALSE(Go("abs", false).escaped);
  EXPECT_EQ(Go("abs", false).err, 0);
}

// F16: each link of this chain stays inside when checked on its own (lexically), but
// x/esc -> up/../.. with x/up -> . climbs above the root when resolved.
TEST(ResolverChain, SymlinkChainCannotLeaveTheMount) {
  std::vector<table::Node> nodes = {
      {"x", S_IFDIR | 0755, 0, 1, 0, {}},
      {"x/up", S_IFLNK | 0777, 0, 2, 0, "."},
      {"x/esc", S_IFLNK | 0777, 0, 3, 0, "up/../.."},
      {"x/ok", S_IFLNK | 0777, 0, 4, 0, "up/../y"},
      {"y", S_IFDIR | 0755, 0, 5, 0, {}},
      {"y/f", S_IFREG | 0644, 1, 6, table::kLocal, {}},
  };
  auto img = table::Build(nodes, {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  table::TableView view;
  ASSERT_TRUE(view.Attach(*img).ok());
  Resolver r(&view, "/fanstore/ds");
  char out[PATH_MAX] = "";
  Walk w = r.Resolve(r.root(), "x/esc/etc/passwd", true, out);
  EXPECT_FALSE(w.escaped) << out;
  EXPECT_EQ(w.err, EXDEV);
  w = r.Resolve(r.root(), "x/esc", true, out);
  EXPECT_EQ(w.err, EXDEV);
  w = r.Resolve(r.root(), "x/ok/f", true, out);
  ASSERT_EQ(w.err, 0);
  EXPECT_EQ(view.Path(*w.entry), "y/f");
  // The caller's own ".." after a link may still leave, as it would on any file system.
  w = r.Resolve(r.root(), "x/up/../..", true, out);
  EXPECT_TRUE(w.escaped);
  EXPECT_STREQ(out, "/fanstore");
}

TEST_F(ResolverTest, RelativeToADirectory) {
  EXPECT_EQ(PathOf(Go("x.txt", true, "/m", "a")), "a/x.txt");
  EXPECT_EQ(PathOf(Go("../empty", true, "/m", "a")), "empty");
  EXPECT_EQ(PathOf(Go("", true, "/m", "a/b")), "a/b");
  EXPECT_EQ(PathOf(Go("y.bin", true, "/m", "a/b")), "a/b/y.bin");
}

TEST_F(ResolverTest, AbsolutePath) {
  Resolver r(&view_, "/fanstore/ds");
  char buf[64];
  ASSERT_EQ(r.AbsolutePath(view_.at(0), buf, sizeof buf), 12);
  EXPECT_STREQ(buf, "/fanstore/ds");
  ASSERT_GT(r.AbsolutePath(*view_.Lookup("a/b/y.bin"), buf, sizeof buf), 0);
  EXPECT_STREQ(buf, "/fanstore/ds/a/b/y.bin");
  EXPECT_EQ(r.AbsolutePath(*view_.Lookup("a/b/y.bin"), buf, 10), -ERANGE);
}

TEST(MountPath, Normalize) {
  char out[PATH_MAX];
  ASSERT_TRUE(NormalizeMount("/fanstore//ds/", out));
  EXPECT_STREQ(out, "/fanstore/ds");
  ASSERT_TRUE(NormalizeMount("//./a/.", out));
  EXPECT_STREQ(out, "/a");
  EXPECT_FALSE(NormalizeMount("rel/x", out));
  EXPECT_FALSE(NormalizeMount("/", out));
  EXPECT_FALSE(NormalizeMount("/a/../b", out));
  EXPECT_FALSE(NormalizeMount(nullptr, out));
}

// The components as "name" strings, "." and ".." marked by their kind ("<.>", "<..>").
template <typename Path>
std::vector<std::string> Split(Path path) {
  std::vector<std::string> out;
  PathTokenizer tokens(path);
  for (PathComponent c; tokens.Next(&c);) {
    EXPECT_EQ(c.kind == LastKind::kDot, c.name == ".");
    EXPECT_EQ(c.kind == LastKind::kDotDot, c.name == "..");
    out.push_back(c.kind == LastKind::kName ? std::string(c.name)
                                            : "<" + std::string(c.name) + ">");
  }
  return out;
}

TEST(PathTokenizer, SplitsAsTheKernel) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split("//a///b/./c/../"), (V{"a", "b", "<.>", "c", "<..>"}));
  EXPECT_EQ(Split("a"), V{"a"});
  EXPECT_EQ(Split(".a/..b/..."), (V{".a", "..b", "..."}));
  EXPECT_EQ(Split("///"), V{});
  EXPECT_EQ(Split(""), V{});
  // A string_view ends at its size, not at a NUL; a NUL inside it is no separator.
  EXPECT_EQ(Split(std::string_view("x/y/z", 3)), (V{"x", "y"}));
  EXPECT_EQ(Split(std::string_view()), V{});
  EXPECT_EQ(Split(std::string_view("p\0q/r", 5)), (V{std::string("p\0q", 3), "r"}));
}

TEST(PathTokenizer, RestAndDone) {
  PathTokenizer tokens("a//b//");
  PathComponent c;
  ASSERT_TRUE(tokens.Next(&c));
  EXPECT_STREQ(tokens.pos(), "//b//");
  EXPECT_EQ(tokens.rest(), "//b//");
  EXPECT_FALSE(tokens.Done());
  ASSERT_TRUE(tokens.Next(&c));
  EXPECT_EQ(c.name, "b");
  EXPECT_EQ(tokens.rest(), "//");
  EXPECT_TRUE(tokens.Done());
  EXPECT_FALSE(tokens.Next(&c));
  PathTokenizer sized(std::string_view("a/b/c", 3));
  ASSERT_TRUE(sized.Next(&c));
  EXPECT_EQ(sized.rest(), "/b");
  ASSERT_TRUE(sized.Next(&c));
  EXPECT_EQ(sized.rest(), "");
  EXPECT_TRUE(sized.Done());
}

TEST(MountPath, NormalizeAbsolute) {
  char out[PATH_MAX];
  ASSERT_TRUE(NormalizeAbsolute("//a//b/", false, out));
  EXPECT_STREQ(out, "/a/b");
  ASSERT_TRUE(NormalizeAbsolute("///", false, out));
  EXPECT_STREQ(out, "/");
  EXPECT_FALSE(NormalizeAbsolute("/a/./b", false, out));
  ASSERT_TRUE(NormalizeAbsolute("/a/./b/.", true, out));
  EXPECT_STREQ(out, "/a/b");
  EXPECT_FALSE(NormalizeAbsolute("/a/../b", true, out));
  EXPECT_FALSE(NormalizeAbsolute("a/b", true, out));
  std::string long_path(PATH_MAX, 'x');
  long_path[0] = '/';
  EXPECT_FALSE(NormalizeAbsolute(long_path.c_str(), true, out));
}

TEST(MountPath, UnderMountSpelled) {
  EXPECT_STREQ(UnderMountSpelled("/fanstore/ds", "//fanstore//ds/./x"), "/./x");
  EXPECT_STREQ(UnderMountSpelled("/fanstore/ds", "/./fanstore/./ds"), "");
  EXPECT_STREQ(UnderMountSpelled("/fanstore/ds", "/fanstore/ds//"), "//");
  EXPECT_EQ(UnderMountSpelled("/fanstore/ds", "/fanstore/../fanstore/ds/x"), nullptr);
  EXPECT_EQ(UnderMountSpelled("/fanstore/ds", "//fanstore//dsx"), nullptr);
  EXPECT_EQ(UnderMountSpelled("/fanstore/ds", "//fanstore"), nullptr);
  EXPECT_EQ(UnderMountSpelled("/fanstore/ds", "/usr/lib"), nullptr);
  EXPECT_EQ(UnderMountSpelled("/fanstore/ds", "fanstore/ds"), nullptr);
}

TEST(MountPath, UnderMount) {
  EXPECT_STREQ(UnderMount("/fanstore/ds", "/fanstore/ds"), "");
  EXPECT_STREQ(UnderMount("/fanstore/ds", "/fanstore/ds/x/y"), "/x/y");
  EXPECT_EQ(UnderMount("/fanstore/ds", "/fanstore/dsx"), nullptr);
  EXPECT_EQ(UnderMount("/fanstore/ds", "/fanstore"), nullptr);
  EXPECT_EQ(UnderMount("/fanstore/ds", "/f"), nullptr);
  EXPECT_EQ(UnderMount("/fanstore/ds", "fanstore/ds"), nullptr);
}

TEST(MountPath, WorkingDirectoryAboveTheMount) {
  EXPECT_EQ(AncestorLength("/fanstore/ds", "/"), 1);
  EXPECT_EQ(AncestorLength("/fanstore/ds", "/fanstore"), 9);
  EXPECT_EQ(AncestorLength("/fanstore/ds", "/fanstore/ds"), -1);
  EXPECT_EQ(AncestorLength("/fanstore/ds", "/fan"), -1);
  EXPECT_EQ(AncestorLength("/fanstore/ds", "/tmp"), -1);
  EXPECT_STREQ(EntersFromAncestor("/fanstore/ds", 9, "ds/x"), "/x");
  EXPECT_STREQ(EntersFromAncestor("/fanstore/ds", 9, "ds"), "");
  EXPECT_STREQ(EntersFromAncestor("/fanstore/ds", 9, "./ds/x"), "/x");
  EXPECT_STREQ(EntersFromAncestor("/fanstore/ds", 9, ".//./ds"), "");
  EXPECT_EQ(EntersFromAncestor("/fanstore/ds", 9, "dsx"), nullptr);
  EXPECT_EQ(EntersFromAncestor("/fanstore/ds", 9, "other"), nullptr);
  EXPECT_STREQ(EntersFromAncestor("/fanstore/ds", 1, "fanstore/ds/a"), "/a");
  EXPECT_EQ(EntersFromAncestor("/fanstore/ds", 1, "fanstore"), nullptr);
  EXPECT_EQ(EntersFromAncestor("/fanstore/ds", -1, "ds"), nullptr);
}

}  // namespace
}  // namespace fanstore::interceptor
