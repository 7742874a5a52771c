// FileCache: atomic insertion, least-recently-used eviction, and concurrent writers of a key.
#include "agent/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "common/io.h"
#include "common/testing/temp_dir.h"

namespace fanstore::agent {
namespace {

// Stores `data` under `key` the way the agent does: Begin, write, Commit.
Result<int> Put(FileCache& c, uint64_t key, std::string_view data, bool evict = true,
                bool want_fd = true) {
  FileCache::Pending p;
  FS_RETURN_IF_ERROR(c.Begin(key, data.size(), evict, &p));
  Status s = WriteFull(p.fd.get(), data.data(), data.size(), "cache test");
  if (!s.ok()) {
    c.Abort(&p);
    return s;
  }
  return c.Commit(&p, want_fd);
}

class CacheTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"cache-test"};
  void SetUp() override { dir_ = tmp_.path(); }
  std::string ReadFd(int fd) {
    std::string out(1 << 16, '\0');
    ssize_t n = ::pread(fd, out.data(), out.size(), 0);
    out.resize(n < 0 ? 0 : n);
    return out;
  }
  std::vector<std::string> Names() {
    std::vector<std::string> v;
    DIR* d = ::opendir(dir_.c_str());
    while (struct dirent* de = ::readdir(d))
      if (de->d_name[0] != '.') v.push_back(de->d_name);
    ::closedir(d);
    return v;
  }
  std::string dir_;
};

TEST_F(CacheTest, PutGivesAReadOnlyDescriptorAndOpenFindsIt) {
  FileCache c;
  c.Init(dir_, 1 << 20);
  auto fd = Put(c, 42, "hello");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(ReadFd(*fd), "hello");
  EXPECT_EQ(::fcntl(*fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  ::close(*fd);
  int again = c.Open(42);
  ASSERT_GE(again, 0);
  EXPECT_EQ(ReadFd(again), "hello");
  ::close(again);
  EXPECT_EQ(c.Open(43), -1);
  EXPECT_EQ(c.used(), 5u);
  // Only the final name exists: no temporary files left behind.
  EXPECT_EQ(Names().size(), 1u);
  auto none = Put(c, 44, "x", true, /*want_fd=*/false);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, -1);
}

TEST_F(CacheTest, EvictsLeastRecentlyUsedAndPrefetchDoesNotEvict) {
  FileCache c;
  c.Init(dir_, 10);
  for (uint64_t k : {1, 2}) {
    auto fd = Put(c, k, "abcd");
    ASSERT_TRUE(fd.ok());
    ::close(*fd);
  }
  ::close(c.Open(1));  // 1 is now the most recent
  EXPECT_FALSE(Put(c, 3, "abcd", /*evict=*/false).ok());
  auto fd = Put(c, 3, "abcd");
  ASSERT_TRUE(fd.ok());
  ::close(*fd);
  EXPECT_EQ(c.Open(2), -1);
  int one = c.Open(1);
  EXPECT_GE(one, 0);
  ::close(one);
  EXPECT_EQ(c.evictions(), 1u);
  EXPECT_EQ(c.used(), 8u);
  EXPECT_FALSE(Put(c, 9, std::string(11, 'x')).ok());
}

TEST_F(CacheTest, ConcurrentWritersOfOneKeyStoreItOnce) {
  FileCache c;
  c.Init(dir_, 1 << 20);
  const std::string data(100000, 'q');
  std::vector<std::thread> ts;
  std::vector<int> fds(8, -2);
  for (int i = 0; i < 8; i++)
    ts.emplace_back([&, i] {
      auto fd = Put(c, 7, data);
      fds[i] = fd.ok() ? *fd : -1;
    });
  for (auto& t : ts) t.join();
  for (int fd : fds) {
    ASSERT_GE(fd, 0);
    EXPECT_EQ(ReadFd(fd).size(), std::min<size_t>(data.size(), 1 << 16));
    ::close(fd);
  }
  EXPECT_EQ(c.used(), data.size());
  EXPECT_EQ(Names().size(), 1u);
}

}  // namespace
}  // namespace fanstore::agent
