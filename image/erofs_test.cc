#include "image/erofs.h"
#include "image/mount.h"
#include "image/mount_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/io.h"
#include "common/testing/temp_dir.h"

namespace fanstore::image {
namespace {

// A tree with every kind of entry the writer takes: directories (one spanning several
// directory blocks), files of sizes around the block sizes, an empty file, a symlink, a hard
// link, and names with odd bytes.
struct Tree {
  std::deque<std::string> strings;  // stable storage for the nodes' views
  std::vector<Node> nodes;
  std::map<uint32_t, std::string> content;  // regular files' bytes

  std::string_view Keep(std::string s) { return strings.emplace_back(std::move(s)); }
  uint32_t Add(uint32_t parent, std::string name, uint32_t mode, uint64_t size = 0) {
    Node n;
    n.parent = parent;
    n.name = Keep(std::move(name));
    n.mode = mode;
    n.size = size;
    n.mtime_ns = 1700000000123456789 + static_cast<int64_t>(nodes.size()) * 1000;
    nodes.push_back(n);
    const uint32_t id = static_cast<uint32_t>(nodes.size() - 1);
    if (S_ISREG(mode)) {
      std::string c(size, '\0');
      for (uint64_t k = 0; k < size; k++) c[k] = static_cast<char>((k * 131 + id * 7) & 0xff);
      content[id] = c;
    }
    return id;
  }
  std::string Path(uint32_t n) const {
    return n == 0
               ? ""
               : Path(nodes[n].parent) + (nodes[n].parent ? "/" : "") + std::string(nodes[n].name);
  }
};

Tree Sample() {
  Tree t;
  t.Add(0, "", S_IFDIR | 0755);
  const uint32_t a = t.Add(0, "a", S_IFDIR | 0750);
  const uint32_t big = t.Add(0, "big dir", S_IFDIR | 0755);
  for (uint64_t size : {1u, 511u, 512u, 513u, 4095u, 4096u, 4097u, 100000u})
    t.Add(a, "f" + std::to_string(size), S_IFREG | 0644, size);
  t.Add(a, "empty", S_IFREG | 0600, 0);
  const uint32_t target = t.Add(0, "target.bin", S_IFREG | 0444, 3000);
  Node link;
  link.parent = a;
  link.name = t.Keep("second-name");
  link.mode = S_IFREG | 0444;
  link.link = target;
  t.nodes.push_back(link);
  Node sym;
  sym.parent = 0;
  sym.name = t.Keep("sym");
  sym.mode = S_IFLNK | 0777;
  sym.target = t.Keep("a/f512");
  t.nodes.push_back(sym);
  t.Add(0, std::string(255, 'n'), S_IFREG | 0644, 10);
  t.Add(0, "-dash", S_IFREG | 0644, 5);  // sorts before "."
  t.Add(0, "caf\xc3\xa9 space", S_IFREG | 0644, 7);
  // Added in byte order (Plan keeps it), with names on either side of "." and ".." and a first
  // byte above 0x7f: the kernel finds each by a binary search in that order.
  const uint32_t sorted = t.Add(0, "sorted", S_IFDIR | 0755);
  for (const char* name : {"-a", ".-b", "..c", "a", "\xc3\xa9t\xc3\xa9"})
    t.Add(sorted, name, S_IFREG | 0644, 9);
  for (int i = 0; i < 300; i++)
    t.Add(big, "img_" + std::to_string(i) + ".jpg", S_IFREG | 0644, 40 + i);
  t.Add(big, "sub", S_IFDIR | 0700);
  return t;
}

// Writes the blob (every file's bytes at its offset) and the metadata image into dir.
void Write(const Tree& t, const ErofsImage& img, const std::string& dir) {
  UniqueFD blob(::open((dir + "/blob").c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_GE(blob.get(), 0);
  for (const auto& [id, c] : t.content) {
    if (c.empty()) {
      EXPECT_EQ(img.BlobOffset(id), kNone);
      continue;
    }
    ASSERT_EQ(img.BlobOffset(id) % img.BlockSize(), 0u);
    ASSERT_EQ(::pwrite(blob.get(), c.data(), c.size(), static_cast<off_t>(img.BlobOffset(id))),
              static_cast<ssize_t>(c.size()));
  }
  ASSERT_EQ(::ftruncate(blob.get(), static_cast<off_t>(img.blob_size())), 0);
  UniqueFD meta(::open((dir + "/meta").c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_GE(meta.get(), 0);
  Status st = img.WriteMeta(meta.get());
  ASSERT_TRUE(st.ok()) << st.ToString();
  struct stat s;
  ASSERT_EQ(::fstat(meta.get(), &s), 0);
  EXPECT_EQ(static_cast<uint64_t>(s.st_size), img.meta_size());
}

std::set<std::string> List(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  return names;
}

// The tree as it reads through the file system at root: contents, targets, listings; with
// `attrs`, modes, owners, mtimes, link counts and hard links' inodes too.
void ExpectTree(const Tree& t, const std::string& root, bool attrs, uint32_t uid, uint32_t gid) {
  std::map<uint32_t, std::set<std::string>> listing;
  for (uint32_t i = 1; i < t.nodes.size(); i++)
    listing[t.nodes[i].parent].insert(std::string(t.nodes[i].name));
  for (uint32_t i = 0; i < t.nodes.size(); i++) {
    const Node& n = t.nodes[i];
    const std::string p = root + "/" + t.Path(i);
    SCOPED_TRACE(p);
    struct stat s;
    ASSERT_EQ(::lstat(p.c_str(), &s), 0) << std::strerror(errno);
    EXPECT_EQ(s.st_mode & S_IFMT, n.mode & S_IFMT);
    if (S_ISDIR(n.mode)) {
      std::set<std::string> want = listing[i];
      want.insert(".");
      want.insert("..");
      EXPECT_EQ(List(p), want);
    } else if (S_ISLNK(n.mode)) {
      char buf[4096];
      const ssize_t len = ::readlink(p.c_str(), buf, sizeof buf);
      EXPECT_EQ(std::string(buf, len > 0 ? len : 0), n.target);
    } else {
      const uint32_t file = n.link == kNone ? i : n.link;
      auto got = ReadSmallFile(p, 1 << 20);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, t.content.at(file));
      if (attrs && n.link != kNone) {
        struct stat f;
        ASSERT_EQ(::lstat((root + "/" + t.Path(file)).c_str(), &f), 0);
        EXPECT_EQ(s.st_ino, f.st_ino);
        EXPECT_EQ(s.st_nlink, 2u);
      }
    }
    if (!attrs) continue;
    EXPECT_EQ(s.st_uid, uid);
    EXPECT_EQ(s.st_gid, gid);
    if (!S_ISLNK(n.mode) && n.link == kNone) {
      EXPECT_EQ(s.st_mode & 07777, n.mode & 07777);
    }
    const Node& f = n.link == kNone ? n : t.nodes[n.link];
    EXPECT_EQ(s.st_mtim.tv_sec, f.mtime_ns / 1000000000);
    EXPECT_EQ(s.st_mtim.tv_nsec, f.mtime_ns % 1000000000);
  }
}

TEST(ErofsImage, BlobExtentsAreAlignedAndDisjoint) {
  Tree t = Sample();
  auto img = ErofsImage::Plan(t.nodes, {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->BlockSize(), 512u);
  EXPECT_EQ(img->Nid(0), 1u);  // never 0: readdir(3) hides inode number 0
  std::map<uint64_t, uint64_t> extents;
  for (const auto& [id, c] : t.content)
    if (!c.empty()) extents[img->BlobOffset(id)] = c.size();
  uint64_t end = 0;
  for (const auto& [off, size] : extents) {
    EXPECT_GE(off, end);
    end = off + size;
  }
  EXPECT_LE(end, img->blob_size());
  EXPECT_EQ(img->BlobOffset(0), kNone);
}

TEST(ErofsImage, RefusesTreesTheKernelMustNotSee) {
  auto refused = [](Tree t, const std::string& why) {
    auto img = ErofsImage::Plan(t.nodes, {});
    EXPECT_FALSE(img.ok()) << why;
    if (!img.ok()) {
      EXPECT_NE(img.status().message().find("erofs image"), std::string::npos);
    }
  };
  refused(Tree{}, "no nodes");
  {
    Tree t;
    t.Add(0, "", S_IFREG | 0644);
    refused(t, "a file for a root");
  }
  for (std::string bad : {std::string("a/b"), std::string("."), std::string(".."), std::string(""),
                          std::string(256, 'x'), std::string("nul\0byte", 8)}) {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    t.Add(0, bad, S_IFREG | 0644, 1);
    refused(t, "the name " + bad);
  }
  {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    t.Add(0, "x", S_IFREG | 0644, 1);
    t.Add(0, "x", S_IFDIR | 0755);
    refused(t, "a name twice");
  }
  {
    Tree t;  // two directories that are each other's parent: unreachable from the root
    t.Add(0, "", S_IFDIR | 0755);
    t.Add(2, "p", S_IFDIR | 0755);
    t.Add(1, "q", S_IFDIR | 0755);
    refused(t, "a loop of parents");
  }
  {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    const uint32_t f = t.Add(0, "f", S_IFREG | 0644, 1);
    t.Add(f, "child", S_IFREG | 0644, 1);
    refused(t, "a file as a parent");
  }
  {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    t.Add(0, "dev", S_IFCHR | 0644);
    refused(t, "a device node");
  }
  {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    t.Add(0, "d", S_IFDIR | 0755);
    Node l;
    l.parent = 0;
    l.name = t.Keep("l");
    l.mode = S_IFREG | 0644;
    l.link = 1;
    t.nodes.push_back(l);
    refused(t, "a hard link to a directory");
  }
  {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    Node s;
    s.parent = 0;
    s.name = t.Keep("s");
    s.mode = S_IFLNK | 0777;
    t.nodes.push_back(s);
    refused(t, "a symlink without a target");
  }
  {
    Tree t;
    t.Add(0, "", S_IFDIR | 0755);
    t.Add(0, "", S_IFREG);  // replaced below: Add would fill 1 PiB of content
    t.nodes.back().name = t.Keep("huge");
    t.nodes.back().size = uint64_t{1} << 50;
    refused(t, "a file past the chunk size");
  }
  {
    Tree t;  // 24 TiB of files: past 2^32 blocks of 4 KiB, which an image can address
    t.Add(0, "", S_IFDIR | 0755);
    for (int i = 0; i < 3; i++) {
      t.Add(0, "", S_IFREG);
      t.nodes.back().name = t.Keep("big" + std::to_string(i));
      t.nodes.back().size = uint64_t{1} << 43;
    }
    refused(t, "more blocks than an image addresses");
  }
}

// erofs-utils' own checker reads the image as the kernel would and extracts it (4 KiB blocks:
// the checker of erofs-utils 1.5 knows no other).
TEST(ErofsImage, FsckErofsExtractsTheTree) {
  if (::access("/usr/bin/fsck.erofs", X_OK) != 0) {
    GTEST_SKIP() << "fsck.erofs (erofs-utils) is not installed";
  }
  test::TempDir dir("erofs");
  Tree t = Sample();
  auto img = ErofsImage::Plan(t.nodes, Options{.block_bits = 12});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  Write(t, *img, dir.path());
  const std::string cmd = "fsck.erofs --device='" + dir.path() + "/blob' --extract='" + dir.path() +
                          "/out' '" + dir.path() + "/meta' >'" + dir.path() + "/fsck.log' 2>&1";
  const int rc = std::system(cmd.c_str());
  auto log = ReadSmallFile(dir.path() + "/fsck.log", 1 << 20);
  ASSERT_EQ(rc, 0) << (log.ok() ? *log : "");
  ExpectTree(t, dir.path() + "/out", false, 0, 0);
}

// The kernel mounts it (root only; file-backed, 6.12+), with the blob as device 1, and serves
// every name, byte and attribute.
TEST(ErofsImage, TheKernelMountsIt) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "mounting needs root";
  }
  test::TempDir dir("erofs");
  Tree t = Sample();
  auto img = ErofsImage::Plan(t.nodes, Options{.uid = 1234, .gid = 5678, .block_bits = 0});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  Write(t, *img, dir.path());
  const std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  const std::string opts = "device=" + dir.path() + "/blob";
  if (::mount((dir.path() + "/meta").c_str(), mnt.c_str(), "erofs",
              MS_RDONLY | MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    if (errno == ENODEV || errno == ENOTBLK) {
      GTEST_SKIP() << "no file-backed erofs here: " << std::strerror(errno);
    }
    FAIL() << "mount: " << std::strerror(errno);
  }
  ExpectTree(t, mnt, true, 1234, 5678);
  EXPECT_EQ(::umount2(mnt.c_str(), 0), 0) << std::strerror(errno);
}

// The tree file: what the job user's agent hands root. Every byte of it is hostile to the reader.
UniqueFD TreeFileOf(const std::string& path, const std::string& bytes) {
  UniqueFD fd(::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600));
  EXPECT_TRUE(fd.valid());
  EXPECT_TRUE(WriteFull(fd.get(), bytes.data(), bytes.size(), path).ok());
  return fd;
}

// The tree file of `t` as the agent writes it: in canonical order (the blob's order renumbered
// with the nodes), or as `t` has it.
std::string TreeBytes(const Tree& t, const std::vector<uint32_t>& order, uint64_t blob_size,
                      bool canonical = true) {
  test::TempDir dir("tree");
  UniqueFD fd(::open((dir.path() + "/t").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  std::vector<Node> nodes = t.nodes;
  std::vector<uint32_t> o = order;
  if (canonical) {
    EXPECT_TRUE(Canonical(&nodes, &o).ok());
  }
  EXPECT_TRUE(WriteTree(fd.get(), nodes, o, blob_size).ok());
  return *ReadSmallFile(dir.path() + "/t", 1 << 30);
}

// Every node of a tree file (their strings kept in `keep`), or the first error.
Result<std::vector<Node>> NodesOf(const TreeFile& t, std::deque<std::string>* keep) {
  std::vector<Node> out;
  auto cur = t.Nodes();
  for (;;) {
    auto x = cur->Next();
    if (!x.ok()) return x.status();
    if (*x == nullptr) return out;
    Node n = **x;
    n.name = keep->emplace_back(n.name);
    n.target = keep->emplace_back(n.target);
    out.push_back(n);
  }
}

TEST(TreeFile, ReadsBackWhatWasWritten) {
  test::TempDir dir("tree");
  Tree t = Sample();
  std::vector<uint32_t> order = {5, 3, 4};
  const std::string bytes = TreeBytes(t, order, 12345);
  auto id = Canonical(&t.nodes, &order);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  UniqueFD fd = TreeFileOf(dir.path() + "/t", bytes);
  auto back = ReadTree(fd.get());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  std::vector<uint32_t> back_order;
  ASSERT_TRUE((*back)->BlobOrder([&](uint32_t x) { back_order.push_back(x); }).ok());
  EXPECT_EQ(back_order, order);
  EXPECT_EQ((*back)->blob_size(), 12345u);
  std::deque<std::string> keep;
  auto nodes = NodesOf(**back, &keep);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), t.nodes.size());
  for (size_t i = 0; i < t.nodes.size(); i++) {
    const Node &a = t.nodes[i], &b = (*nodes)[i];
    EXPECT_EQ(std::tie(a.parent, a.name, a.mode, a.size, a.mtime_ns, a.target, a.link),
              std::tie(b.parent, b.name, b.mode, b.size, b.mtime_ns, b.target, b.link));
  }
  // Breadth first, each directory's children by name.
  for (size_t i = 2; i < t.nodes.size(); i++) {
    EXPECT_LE(t.nodes[i - 1].parent, t.nodes[i].parent);
    if (t.nodes[i - 1].parent == t.nodes[i].parent) {
      EXPECT_LT(t.nodes[i - 1].name, t.nodes[i].name);
    }
  }
}

// Cut anywhere, grown by a byte, given another magic, a count or a name length that runs past the
// end: refused (when it is opened, or when its nodes are read), with nothing allocated past the
// file's size.
TEST(TreeFile, RefusesEveryMalformedFile) {
  test::TempDir dir("tree");
  const std::string good = TreeBytes(Sample(), {1, 2}, 0);
  auto refused = [&](const std::string& bytes, uint64_t max = kMaxTreeBytes) {
    UniqueFD fd = TreeFileOf(dir.path() + "/t", bytes);
    auto t = ReadTree(fd.get(), max);
    std::deque<std::string> keep;
    return !t.ok() || !NodesOf(**t, &keep).ok();
  };
  EXPECT_FALSE(refused(good));
  for (size_t cut = 0; cut < good.size(); cut += cut < 64 ? 1 : 97)
    EXPECT_TRUE(refused(good.substr(0, cut))) << "cut at " << cut;
  EXPECT_TRUE(refused(good + "x"));
  EXPECT_TRUE(refused(good, good.size() - 1));
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_TRUE(refused(bad));
  bad = good;
  bad[8] = '\xff';  // many more nodes than the file holds
  bad[11] = '\x7f';
  EXPECT_TRUE(refused(bad));
  bad = good;
  bad[32 + 28] = '\xff';  // the root's name, past the strings
  bad[32 + 29] = '\xff';
  EXPECT_TRUE(refused(bad));
}

// Bytes flipped at random: read, planned and written (as root does) or refused, never a crash;
// and a tree that plans is one the kernel may see (ErofsImage::Check).
TEST(TreeFile, FlippedBytesAreReadOrRefusedNeverTrusted) {
  test::TempDir dir("tree");
  const std::string good = TreeBytes(Sample(), {1, 2, 3}, 0);
  UniqueFD null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  uint32_t seed = 12345;
  for (int round = 0; round < 2000; round++) {
    std::string bad = good;
    for (int k = 0; k < 3; k++) {
      seed = seed * 1103515245 + 12345;
      bad[(seed >> 8) % bad.size()] ^= static_cast<char>(1 + (seed >> 24) % 255);
    }
    UniqueFD fd = TreeFileOf(dir.path() + "/t", bad);
    auto tree = ReadTree(fd.get());
    if (!tree.ok()) continue;
    auto img = ErofsImage::PlanSorted(*tree, {});
    if (img.ok()) {
      EXPECT_TRUE(img->WriteMeta(null.get()).ok());
    }
  }
}

// Root plans only a tree in canonical order: the same tree in another order is refused, never
// sorted by root.
TEST(TreeFile, RootRefusesATreeOutOfOrder) {
  test::TempDir dir("tree");
  auto plan = [&](const std::string& bytes) {
    UniqueFD fd = TreeFileOf(dir.path() + "/t", bytes);
    auto tree = ReadTree(fd.get());
    EXPECT_TRUE(tree.ok());
    return ErofsImage::PlanSorted(*tree, {}).status();
  };
  EXPECT_TRUE(plan(TreeBytes(Sample(), {}, 0)).ok());
  Status st = plan(TreeBytes(Sample(), {}, 0, /*canonical=*/false));
  EXPECT_NE(st.message().find("order"), std::string::npos) << st.ToString();
  Tree d;  // a directory's children before its parent's other children
  d.Add(0, "", S_IFDIR | 0755);
  const uint32_t sub = d.Add(0, "sub", S_IFDIR | 0755);
  d.Add(sub, "x", S_IFREG | 0644, 1);
  d.Add(0, "y", S_IFREG | 0644, 1);
  st = plan(TreeBytes(d, {}, 0, /*canonical=*/false));
  EXPECT_NE(st.message().find("breadth-first order"), std::string::npos) << st.ToString();
  Tree t;  // breadth first, but two siblings out of byte order
  t.Add(0, "", S_IFDIR | 0755);
  t.Add(0, "b", S_IFREG | 0644, 1);
  t.Add(0, "a", S_IFREG | 0644, 1);
  st = plan(TreeBytes(t, {}, 0, /*canonical=*/false));
  EXPECT_NE(st.message().find("out of order"), std::string::npos) << st.ToString();
}

// Root's side: the image mounted from the agent's tree and blob, and what root refuses.
class ImageMount : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "mounting needs root";
    }
    struct statfs fs;
    ASSERT_EQ(::statfs(dir_.path().c_str(), &fs), 0);
    if (fs.f_type == TMPFS_MAGIC) {
      GTEST_SKIP() << "the kernel mounts no image from tmpfs";
    }
    auto img = ErofsImage::Plan(t_.nodes, {}, order_);
    ASSERT_TRUE(img.ok());
    blob_size_ = img->blob_size();
    Write(t_, *img, dir_.path());  // the blob at dir/blob (and a metadata image we ignore)
    blob_ = UniqueFD(::open((dir_.path() + "/blob").c_str(), O_RDWR | O_CLOEXEC));
    tree_ = TreeFileOf(dir_.path() + "/tree", TreeBytes(t_, order_, blob_size_));
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0700), 0);
    meta_dir_ = UniqueFD(::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    target_ = UniqueFD(::open(mnt_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    req_.tree_fd = tree_.get();
    req_.blob_fd = blob_.get();
    req_.meta_dir_fd = meta_dir_.get();
    req_.target_fd = target_.get();
    req_.owner = 0;
    req_.group = 0;
  }
  void TearDown() override { (void)::umount2(mnt_.c_str(), MNT_DETACH); }
  Status Mount() {
    Status st = MountTree(req_);
    if (!st.ok() && st.message().find("No such device") != std::string::npos) {
      return Status::Unsupported("no erofs");
    }
    return st;
  }

  test::TempDir dir_{"image-mount"};
  const std::string mnt_ = dir_.path() + "/mnt";
  Tree t_ = Sample();
  const std::vector<uint32_t> order_ = {4, 2};
  uint64_t blob_size_ = 0;
  UniqueFD blob_, tree_, meta_dir_, target_;
  MountRequest req_;
};

TEST_F(ImageMount, ServesTheTreeFromMetadataRootWrote) {
  Status st = Mount();
  if (st.code() == Status::Code::kUnsupported) {
    GTEST_SKIP() << st.ToString();
  }
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectTree(t_, mnt_, true, 0, 0);
  // Nothing named: the metadata is an unnamed file, gone with the mount.
  EXPECT_EQ(List(dir_.path()), (std::set<std::string>{".", "..", "blob", "meta", "mnt", "tree"}));
}

TEST_F(ImageMount, TheBlobThatWasCheckedIsTheOneMounted) {
  // Another file renamed over the blob's path after the caller opened it: the mount reads the
  // descriptor's file.
  UniqueFD other(::open((dir_.path() + "/other").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  ASSERT_EQ(::ftruncate(other.get(), static_cast<off_t>(blob_size_)), 0);
  ASSERT_EQ(::rename((dir_.path() + "/other").c_str(), (dir_.path() + "/blob").c_str()), 0);
  Status st = Mount();
  if (st.code() == Status::Code::kUnsupported) {
    GTEST_SKIP() << st.ToString();
  }
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectTree(t_, mnt_, false, 0, 0);
}

TEST_F(ImageMount, RefusesWhatTheJobUserCouldHaveSwappedOrLiedAbout) {
  auto refused = [&](const std::string& why, const std::string& says) {
    Status st = MountTree(req_);
    EXPECT_FALSE(st.ok()) << why;
    EXPECT_NE(st.message().find(says), std::string::npos) << why << ": " << st.ToString();
    EXPECT_NE(::umount2(mnt_.c_str(), MNT_DETACH), 0) << why << ": it was mounted";
  };
  req_.owner = 4321;  // the blob and the tree are root's, not the job user's
  refused("another user's files", "belongs to uid 0");
  req_.owner = 0;
  UniqueFD d(::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  req_.blob_fd = d.get();
  refused("a directory for a blob", "not a regular file");
  req_.blob_fd = blob_.get();
  ASSERT_EQ(::ftruncate(blob_.get(), static_cast<off_t>(blob_size_ - 1)), 0);
  refused("a blob short of its files", "short of its files");
  ASSERT_EQ(::ftruncate(blob_.get(), static_cast<off_t>(blob_size_)), 0);
  UniqueFD lie = TreeFileOf(dir_.path() + "/lie", TreeBytes(t_, order_, blob_size_ + 512));
  req_.tree_fd = lie.get();
  refused("a tree whose blob size is not its files'", "not the");
  Tree hostile = Sample();
  hostile.nodes[3].name = "../../etc";
  UniqueFD bad = TreeFileOf(dir_.path() + "/bad", TreeBytes(hostile, order_, blob_size_));
  req_.tree_fd = bad.get();
  refused("a name with a slash", "not a valid file name");
  req_.tree_fd = tree_.get();
  req_.owner = kNoOwner;
  refused("no owner given", "no owner");
  req_.owner = 0;
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0777), 0);
  refused("a metadata directory others may write", "only root may write");
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0700), 0);
  UniqueFD on_tmpfs(::memfd_create("tree", MFD_CLOEXEC));  // memory: tmpfs, as /dev/shm
  const std::string bytes = TreeBytes(t_, order_, blob_size_);
  ASSERT_TRUE(WriteFull(on_tmpfs.get(), bytes.data(), bytes.size(), "memfd").ok());
  req_.tree_fd = on_tmpfs.get();
  refused("a tree on tmpfs", "tmpfs");
}

// Directories cost a block of metadata each, and one huge (sparse) file makes the blocks 4 KiB:
// metadata out of proportion to the tree is refused before root writes any.
TEST_F(ImageMount, RefusesMetadataOutOfProportionToTheTree) {
  Tree t;
  t.Add(0, "", S_IFDIR | 0755);
  t.Add(0, "", S_IFREG);  // set below: Add would fill its content
  t.nodes.back().name = t.Keep("huge");
  t.nodes.back().size = uint64_t{1} << 42;
  for (int i = 0; i < 30000; i++) t.Add(0, "d" + std::to_string(i), S_IFDIR | 0755);
  auto img = ErofsImage::Plan(t.nodes, {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ASSERT_EQ(img->BlockSize(), 4096u);
  ASSERT_EQ(::ftruncate(blob_.get(), static_cast<off_t>(img->blob_size())), 0);
  UniqueFD tree = TreeFileOf(dir_.path() + "/wide", TreeBytes(t, {}, img->blob_size()));
  req_.tree_fd = tree.get();
  Status st = MountTree(req_);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("for a tree of its size"), std::string::npos) << st.ToString();
}

// Under Slurm: the agent (here this process) asks the plugin's mount service (a forked child)
// for the mount on local_dir/data, and for the unmount; the epilog detaches what a killed
// service left.
TEST_F(ImageMount, TheServiceMountsOnTheDataRootOnceAndDetaches) {
  const std::string data = dir_.path() + "/data";
  ASSERT_EQ(::mkdir(data.c_str(), 0700), 0);
  auto sock = StartMountService(dir_.path(), 0, 0);
  ASSERT_TRUE(sock.ok()) << sock.status().ToString();
  Status st = AskMount(sock->get(), tree_.get(), blob_.get());
  if (!st.ok() && st.message().find("No such device") != std::string::npos) {
    GTEST_SKIP() << st.ToString();
  }
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectTree(t_, data, true, 0, 0);
  EXPECT_NE(::access((dir_.path() + "/" + kMetaDirName).c_str(), F_OK), 0);  // gone
  st = AskMount(sock->get(), tree_.get(), blob_.get());
  EXPECT_NE(st.message().find("mounted already"), std::string::npos) << st.ToString();
  EXPECT_TRUE(AskUnmount(sock->get()).ok());
  EXPECT_NE(::access((data + "/a").c_str(), F_OK), 0);  // the plain directory again
  while (::waitpid(-1, nullptr, 0) > 0) {
  }
  // A metadata directory planted first, or data/ a symlink: refused, nothing mounted.
  ASSERT_EQ(::mkdir((dir_.path() + "/" + kMetaDirName).c_str(), 0700), 0);
  sock = StartMountService(dir_.path(), 0, 0);
  st = AskMount(sock->get(), tree_.get(), blob_.get());
  EXPECT_NE(st.message().find(kMetaDirName), std::string::npos) << st.ToString();
  ASSERT_EQ(::rmdir((dir_.path() + "/" + kMetaDirName).c_str()), 0);
  ASSERT_EQ(::rename(data.c_str(), (dir_.path() + "/elsewhere").c_str()), 0);
  ASSERT_EQ(::symlink("elsewhere", data.c_str()), 0);
  st = AskMount(sock->get(), tree_.get(), blob_.get());
  EXPECT_NE(st.message().find("not a directory of the job user's"), std::string::npos)
      << st.ToString();
  sock->Reset();  // the service sees the end and exits
  while (::waitpid(-1, nullptr, 0) > 0) {
  }
  // A service killed with its image mounted: the epilog's DetachImage.
  ASSERT_EQ(::unlink(data.c_str()), 0);
  ASSERT_EQ(::rename((dir_.path() + "/elsewhere").c_str(), data.c_str()), 0);
  UniqueFD on(::open(data.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  req_.target_fd = on.get();
  ASSERT_TRUE(MountTree(req_).ok());
  bool detached = false;
  EXPECT_TRUE(DetachImage(dir_.path(), 0, &detached).ok());
  EXPECT_TRUE(detached);
  EXPECT_TRUE(DetachImage(dir_.path(), 0, &detached).ok());
  EXPECT_FALSE(detached);
}

}  // namespace
}  // namespace fanstore::image
