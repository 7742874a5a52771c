// The kernel-visible view end to end in the kernel: a real FUSE mount (as the plugin makes it,
// common/task_views.h) served by KernelView, read with plain system calls, exec and dlopen, in
// a mount namespace of the test's own. Needs root (CI runs as root).
#include "agent/kernel_view.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <list>
#include <set>

#include "agent/testing.h"
#include "common/io.h"
#include "common/table_builder.h"
#include "common/task_views.h"

namespace fanstore::agent {
namespace {

using testing::Content;
using testing::TempDir;

constexpr long kFuseMagic = 0x65735546;

std::string Slurp(const std::string& path) {
  auto r = ReadSmallFile(path, 64 << 20);
  return r.ok() ? r.value() : "<" + r.status().ToString() + ">";
}

class KernelViewTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A namespace of the test's own (before any thread), so that no mount outlives it.
    if (::geteuid() == 0 && ::access("/dev/fuse", R_OK | W_OK) == 0)
      private_ns_ = ::unshare(CLONE_NEWNS) == 0 &&
                    ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
  }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "a FUSE mount for another process needs root";
    ASSERT_TRUE(private_ns_) << "no mount namespace of the test's own";
    src_ = dir_.path() + "/src";
    mnt_ = dir_.path() + "/mnt";
    for (const char* d : {"", "/a", "/lib"}) ASSERT_EQ(::mkdir((src_ + d).c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0);
    Add("a/hello.txt", "hello\n", 0644);
    Add("a/run.sh", "#!/bin/sh\necho ran \"$1\"\n", 0755);
    Add("big.bin", Content(3, 3 << 20), 0644);
    // A real shared library, loaded from the mount by dlopen (the loader's own open and mmap).
    Dl_info info;
    ASSERT_NE(::dladdr(reinterpret_cast<void*>(&ZSTD_versionNumber), &info), 0);
    Add("lib/libzstd-copy.so", Slurp(info.dli_fname), 0755);
    nodes_.push_back({"link", S_IFLNK | 0777, 11, 5, 0, "a/hello.txt"});
    // A directory of more names than one reply of a listing holds (stat only: no bytes behind).
    nodes_.push_back({"many", S_IFDIR | 0755, 0, 5, 0, {}});
    for (int i = 0; i < kMany; i++) {
      names_.push_back("many/f" + std::to_string(10000 + i));
      nodes_.push_back({names_.back(), S_IFREG | 0644, 0, 5, 0, {}});
    }
    nodes_.push_back({"lib", S_IFDIR | 0755, 0, 5, 0, {}});
    table::BuildOptions o;
    o.uid = ::getuid();
    o.gid = ::getgid();
    auto img = table::Build(nodes_, o);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    image_ = std::move(img).value();
    ASSERT_TRUE(table_.Attach(image_).ok());
    view_ = std::make_unique<KernelView>(table_, [this](const std::string& rel) {
      opens_++;
      int fd = ::open((src_ + "/" + rel).c_str(), O_RDONLY | O_CLOEXEC);
      return fd < 0 ? Reply{errno, "", -1} : Reply{0, "", fd};
    });
    UniqueFD target(::open(mnt_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    auto dev = MountFuse(target.get(), ::getuid(), ::getgid());
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    Status st = view_->Serve(std::move(dev).value());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  void TearDown() override {
    if (view_) view_->Stop();
    if (!mnt_.empty()) ::umount2(mnt_.c_str(), MNT_DETACH);
  }

  void Add(const std::string& rel, const std::string& bytes, mode_t mode) {
    ASSERT_TRUE(WriteFileAtomic(src_ + "/" + rel, bytes, mode).ok());
    names_.push_back(rel);
    nodes_.push_back({names_.back(), S_IFREG | mode, bytes.size(), 1700000000000000000, 0, {}});
  }

  static constexpr int kMany = 2000;
  static bool private_ns_;
  TempDir dir_{"kview"};
  std::string src_, mnt_;
  std::list<std::string> names_;  // the nodes' paths point into these
  std::vector<table::Node> nodes_;
  std::string image_;
  table::TableView table_;
  std::unique_ptr<KernelView> view_;
  std::atomic<int> opens_{0};
};
bool KernelViewTest::private_ns_ = false;

TEST_F(KernelViewTest, PlainSystemCallsSeeTheDataset) {
  EXPECT_EQ(Slurp(mnt_ + "/a/hello.txt"), "hello\n");
  EXPECT_EQ(Slurp(mnt_ + "/big.bin"), Content(3, 3 << 20));
  EXPECT_EQ(Slurp(mnt_ + "/link"), "hello\n");  // the kernel follows the link
  char target[64] = {};
  EXPECT_EQ(::readlink((mnt_ + "/link").c_str(), target, sizeof target - 1), 11);
  EXPECT_STREQ(target, "a/hello.txt");
  struct stat st;
  ASSERT_EQ(::stat((mnt_ + "/a/run.sh").c_str(), &st), 0);
  const table::Entry* e = table_.Lookup("a/run.sh");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(st.st_ino, table_.Ino(*e));  // as the interceptor reports it
  EXPECT_EQ(st.st_mode, S_IFREG | 0755u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(e->size));
  EXPECT_EQ(st.st_mtim.tv_sec, 1700000000);
  errno = 0;
  EXPECT_NE(::stat((mnt_ + "/a/missing").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);

  std::set<std::string> names;
  DIR* d = ::opendir((mnt_ + "/a").c_str());
  ASSERT_NE(d, nullptr);
  while (struct dirent* de = ::readdir(d)) names.insert(de->d_name);
  ::closedir(d);
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "hello.txt", "run.sh"}));

  struct statfs fs;
  ASSERT_EQ(::statfs(mnt_.c_str(), &fs), 0);
  EXPECT_EQ(fs.f_type, kFuseMagic);
  EXPECT_TRUE(fs.f_flags & ST_RDONLY);
}

// The kernel opens files itself and keeps their pages: a file read again asks the agent for
// nothing (with FUSE_CAP_NO_OPEN_SUPPORT, Linux 4.19; older kernels send an OPEN per open).
TEST_F(KernelViewTest, AFileReadAgainIsTheKernelsAlone) {
  EXPECT_EQ(Slurp(mnt_ + "/big.bin"), Content(3, 3 << 20));  // many READs, one descriptor a thread
  const int first = opens_.load();
  EXPECT_GE(first, 1);
  EXPECT_LE(first, KernelView::kThreadsPerMount);
  EXPECT_EQ(Slurp(mnt_ + "/a/hello.txt"), "hello\n");
  const int second = opens_.load();
  EXPECT_EQ(second, first + 1);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(Slurp(mnt_ + "/big.bin"), Content(3, 3 << 20));
    EXPECT_EQ(Slurp(mnt_ + "/a/hello.txt"), "hello\n");
  }
  EXPECT_EQ(opens_.load(), second);
  // A file the agent cannot open fails its read with the agent's errno, and the next read asks
  // again.
  ASSERT_EQ(::rename((src_ + "/a/run.sh").c_str(), (src_ + "/a/run.sh.gone").c_str()), 0);
  UniqueFD fd(::open((mnt_ + "/a/run.sh").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  char byte;
  errno = 0;
  EXPECT_LT(::read(fd.get(), &byte, 1), 0);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(::rename((src_ + "/a/run.sh.gone").c_str(), (src_ + "/a/run.sh").c_str()), 0);
  EXPECT_EQ(::read(fd.get(), &byte, 1), 1);
  EXPECT_EQ(byte, '#');
}

// A listing gives the kernel every name's entry (READDIRPLUS): opening what was listed asks the
// agent nothing more, so those names are still there once the agent has stopped, when any
// request fails.
TEST_F(KernelViewTest, AListingGivesTheKernelItsNames) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(mnt_)) names.insert(e.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"a", "big.bin", "lib", "link", "many"}));
  size_t many = 0;  // every reply of a long listing carries its entries, not only the first
  for (const auto& e : std::filesystem::directory_iterator(mnt_ + "/many"))
    many += e.is_regular_file();
  EXPECT_EQ(many, static_cast<size_t>(kMany));
  view_->Stop();
  struct stat st;
  for (const int i : {0, kMany / 2, kMany - 1}) {
    const std::string name = mnt_ + "/many/f" + std::to_string(10000 + i);
    EXPECT_EQ(::stat(name.c_str(), &st), 0) << name << ": " << std::strerror(errno);
  }
  ASSERT_EQ(::stat((mnt_ + "/big.bin").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 3 << 20);
  EXPECT_EQ(st.st_ino, table_.Ino(*table_.Lookup("big.bin")));
  ASSERT_EQ(::lstat((mnt_ + "/link").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  errno = 0;  // a name in a directory not listed was never the kernel's
  EXPECT_NE(::stat((mnt_ + "/a/hello.txt").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOTCONN);
}

// The agent holds a file's descriptor while its reads go on, and lets go once the mount has
// been idle for a second: no file (a fetched one may be a whole file in memory) stays held.
TEST_F(KernelViewTest, NoFileIsHeldAfterItsReads) {
  auto held = [this] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      if (std::filesystem::read_symlink(e.path(), ec).string() == src_ + "/big.bin") n++;
    }
    return n;
  };
  EXPECT_EQ(Slurp(mnt_ + "/big.bin"), Content(3, 3 << 20));
  EXPECT_GE(held(), 1);
  ::usleep(2500 * 1000);
  EXPECT_EQ(held(), 0);
}

TEST_F(KernelViewTest, ProgramsRunAndLibrariesLoadFromIt) {
  FILE* p = ::popen((mnt_ + "/a/run.sh here").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[64] = {};
  ASSERT_NE(std::fgets(line, sizeof line, p), nullptr);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_STREQ(line, "ran here\n");

  void* lib = ::dlopen((mnt_ + "/lib/libzstd-copy.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto version = reinterpret_cast<unsigned (*)()>(::dlsym(lib, "ZSTD_versionNumber"));
  ASSERT_NE(version, nullptr);
  EXPECT_EQ(version(), ZSTD_versionNumber());
  ::dlclose(lib);
}

TEST_F(KernelViewTest, NothingCanBeChanged) {
  const std::string f = mnt_ + "/a/hello.txt";
  errno = 0;
  EXPECT_LT(::open(f.c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_NE(::unlink(f.c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_NE(::mkdir((mnt_ + "/a/new").c_str(), 0755), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_NE(::chmod(f.c_str(), 0600), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(Slurp(src_ + "/a/hello.txt"), "hello\n");
}

// Another user gets EACCES: the mount lets every process in (allow_other), the agent answers
// only the job user and root.
TEST_F(KernelViewTest, AnotherUserIsKeptOut) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(10);
    struct stat st;
    ::_exit(::stat((mnt_ + "/a/hello.txt").c_str(), &st) == 0 ? 11 : errno == EACCES ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// Once the agent stops, the mount answers ENOTCONN: never a hang.
TEST_F(KernelViewTest, AfterStopTheMountFailsInsteadOfHanging) {
  EXPECT_EQ(Slurp(mnt_ + "/a/hello.txt"), "hello\n");
  EXPECT_EQ(view_->mounts(), 1u);
  view_->Stop();
  struct stat st;
  errno = 0;
  EXPECT_NE(::stat((mnt_ + "/big.bin").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_FALSE(view_->Serve(UniqueFD(::open("/dev/null", O_RDONLY))).ok());
}

TEST_F(KernelViewTest, ADescriptorThatIsNotFuseIsRefused) {
  Status st = view_->Serve(UniqueFD(::open("/dev/null", O_RDWR | O_CLOEXEC)));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not /dev/fuse"), std::string::npos) << st.ToString();
  EXPECT_EQ(view_->mounts(), 1u);
}

}  // namespace
}  // namespace fanstore::agent
