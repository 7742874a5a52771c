#include "interceptor/vdir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "common/table_builder.h"

namespace fanstore::interceptor {
namespace {

TEST(VDir, ListsDotsThenChildrenByName) {
  auto img = table::Build({{"d/b", S_IFREG | 0644, 1, 0, 0, {}},
                           {"d/a", S_IFDIR | 0755, 0, 0, 0, {}},
                           {"d/c", S_IFLNK | 0777, 0, 0, 0, "b"}},
                          {});
  ASSERT_TRUE(img.ok());
  table::TableView t;
  ASSERT_TRUE(t.Attach(img.value()).ok());
  const table::Entry* d = t.Lookup("d");
  ASSERT_NE(d, nullptr);
  VDir* v = NewVDir(t.IndexOf(*d), -1);
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(IsVDir(reinterpret_cast<DIR*>(v)));
  std::vector<std::string> names;
  std::vector<int> types;
  while (struct dirent64* e = NextEntry(t, v)) {
    names.push_back(e->d_name);
    types.push_back(e->d_type);
  }
  EXPECT_EQ(names, (std::vector<std::string>{".", "..", "a", "b", "c"}));
  EXPECT_EQ(types, (std::vector<int>{DT_DIR, DT_DIR, DT_DIR, DT_REG, DT_LNK}));
  v->pos = 3;  // seekdir to a cookie returned by telldir
  struct dirent64* e = NextEntry(t, v);
  ASSERT_NE(e, nullptr);
  EXPECT_STREQ(e->d_name, "b");
  EXPECT_EQ(e->d_ino, t.Ino(*t.Lookup("d/b")));
  EXPECT_EQ(e->d_off, 4);
  free(v);
}

TEST(VDir, RealStreamsAreNotVDirs) {
  DIR* d = opendir("/");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(IsVDir(d));
  closedir(d);
  EXPECT_FALSE(IsVDir(nullptr));
}

}  // namespace
}  // namespace fanstore::interceptor
