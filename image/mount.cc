#include "image/mount.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"

namespace fanstore::image {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the tree file is little-endian");

constexpr char kTreeMagic[8] = {'F', 'S', 'T', 'R', 'E', 'E', '0', '1'};
constexpr size_t kHeaderBytes = 32, kRecordBytes = 32;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Local disk file systems: no user serves their bytes (FUSE), none is shared, none is a
// pseudo file system whose files read otherwise than their size says.
Status LocalDisk(int fd, const char* what) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return Status::FromErrno(std::string("image: the ") + what, errno);
  switch (static_cast<uint32_t>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:  // ext2, ext3 and ext4
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
    case 0x2fc12fc1:  // ZFS
      return Status::OK();
    case TMPFS_MAGIC:
      return Status::Unsupported(std::string("image: the ") + what +
                                 " is on tmpfs, from which the kernel mounts nothing");
    default: {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(fs.f_type));
      return Status::Unsupported(std::string("image: the ") + what +
                                 " is on a file system FanStore mounts no image from (type " + hex +
                                 "): a local disk's (ext4, XFS, Btrfs, F2FS, ZFS) only");
    }
  }
}

Status Regular(int fd, uid_t owner, const char* what, struct stat* st) {
  if (::fstat(fd, st) != 0) return Status::FromErrno(std::string("image: ") + what, errno);
  if (!S_ISREG(st->st_mode))
    return Status::Permission(std::string("image: the ") + what + " is not a regular file");
  if (st->st_uid != owner)
    return Status::Permission(std::string("image: the ") + what + " belongs to uid " +
                              std::to_string(st->st_uid) + ", not the job user's " +
                              std::to_string(owner));
  return LocalDisk(fd, what);
}

Status RootsDirectory(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno("image: the metadata's directory", errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0)
    return Status::Permission(
        "image: the metadata's directory is not a directory of root's that only root may write");
  return LocalDisk(fd, "metadata's directory");
}

}  // namespace

Status WriteTree(int fd, const std::vector<Node>& nodes, const std::vector<uint32_t>& blob_order,
                 uint64_t blob_size) {
  return WriteTree(
      fd,
      [&](const std::function<Status(const Node&)>& emit) {
        for (const Node& n : nodes) FS_RETURN_IF_ERROR(emit(n));
        return Status::OK();
      },
      blob_order, blob_size);
}

Status WriteTree(int fd, const NodeSource& nodes, const std::vector<uint32_t>& blob_order,
                 uint64_t blob_size) {
  // Written a MiB at a time: the whole tree in memory would be tens of MB of fresh pages. The
  // header's counts are known once the records are out: it is written last, at offset 0.
  std::string out(kHeaderBytes, '\0');
  out.reserve((1u << 20) + 2 * 0xffff);
  auto flush = [&](bool full) {
    if (!full && out.size() < (1u << 20)) return Status::OK();
    Status st = WriteFull(fd, out.data(), out.size(), "image: the tree");
    out.clear();
    return st;
  };
  uint64_t count = 0, strings = 0;
  FS_RETURN_IF_ERROR(nodes([&](const Node& n) {
    if (n.name.size() > 0xffff || n.target.size() > 0xffff)
      return Status::InvalidArgument("image: a name or symlink target too long for the tree");
    if (++count > kMaxTreeNodes)
      return Status::InvalidArgument("image: more names than a tree may hold");
    strings += n.name.size() + n.target.size();
    char rec[kRecordBytes];  // one append a record: 14M of them at ImageNet-22k's size
    const auto name = static_cast<uint16_t>(n.name.size());
    const auto target = static_cast<uint16_t>(n.target.size());
    std::memcpy(rec, &n.parent, 4);
    std::memcpy(rec + 4, &n.mode, 4);
    std::memcpy(rec + 8, &n.size, 8);
    std::memcpy(rec + 16, &n.mtime_ns, 8);
    std::memcpy(rec + 24, &n.link, 4);
    std::memcpy(rec + 28, &name, 2);
    std::memcpy(rec + 30, &target, 2);
    out.append(rec, sizeof rec);
    return flush(false);
  }));
  for (size_t i = 0; i < blob_order.size(); i += 1u << 16) {  // 256 KiB at a time
    const size_t k = std::min<size_t>(blob_order.size() - i, 1u << 16);
    out.append(reinterpret_cast<const char*>(blob_order.data() + i), k * sizeof(uint32_t));
    FS_RETURN_IF_ERROR(flush(false));
  }
  FS_RETURN_IF_ERROR(nodes([&](const Node& n) {
    out.append(n.name);
    out.append(n.target);
    return flush(false);
  }));
  FS_RETURN_IF_ERROR(flush(true));
  std::string header(kTreeMagic, sizeof kTreeMagic);
  Put(&header, static_cast<uint32_t>(count));
  Put(&header, static_cast<uint32_t>(blob_order.size()));
  Put(&header, strings);
  Put(&header, blob_size);
  return PwriteFull(fd, header, 0, "image: the tree");
}

namespace {

// Reads `len` bytes at `off` of the tree into `dst`, or fails.
using ReadFn = std::function<Status(uint64_t off, size_t len, char* dst)>;

// The tree of `size` bytes, each read once: the names into the tree's own memory, the records a
// MiB at a time (never the whole file: it is mostly records, which become nodes).
Result<Tree> Parse(uint64_t size, const ReadFn& read) {
  Tree t;
  t.file_bytes = size;
  if (size < kHeaderBytes)
    return Status::Corruption("image: the tree file is shorter than a header");
  char h[kHeaderBytes];
  FS_RETURN_IF_ERROR(read(0, kHeaderBytes, h));
  if (std::memcmp(h, kTreeMagic, sizeof kTreeMagic) != 0)
    return Status::Corruption("image: not a tree file");
  const uint64_t nodes = Get<uint32_t>(h + 8), order = Get<uint32_t>(h + 12);
  if (nodes > kMaxTreeNodes)
    return Status::Corruption("image: the tree has " + std::to_string(nodes) +
                              " names, more than " + std::to_string(kMaxTreeNodes));
  const uint64_t strings = Get<uint64_t>(h + 16);
  t.blob_size = Get<uint64_t>(h + 24);
  // Each term is below 2^38, so the sum cannot wrap.
  if (strings > size || kHeaderBytes + nodes * kRecordBytes + order * 4 + strings != size)
    return Status::Corruption("image: the tree file's size does not match its header");
  const uint64_t order_at = kHeaderBytes + nodes * kRecordBytes, strings_at = order_at + order * 4;
  t.bytes.resize(strings);
  FS_RETURN_IF_ERROR(read(strings_at, strings, t.bytes.data()));
  t.blob_order.resize(order);
  FS_RETURN_IF_ERROR(read(order_at, order * 4, reinterpret_cast<char*>(t.blob_order.data())));
  t.nodes.reserve(nodes);
  const char* str = t.bytes.data();
  const char* end = str + strings;
  constexpr uint64_t kChunk = (1u << 20) / kRecordBytes;
  std::vector<char> chunk(std::min(nodes, kChunk) * kRecordBytes);
  for (uint64_t i = 0; i < nodes; i += kChunk) {
    const uint64_t k = std::min(kChunk, nodes - i);
    FS_RETURN_IF_ERROR(read(kHeaderBytes + i * kRecordBytes, k * kRecordBytes, chunk.data()));
    for (const char* rec = chunk.data(); rec != chunk.data() + k * kRecordBytes;
         rec += kRecordBytes) {
      Node& n = t.nodes.emplace_back();
      n.parent = Get<uint32_t>(rec);
      n.mode = Get<uint32_t>(rec + 4);
      n.size = Get<uint64_t>(rec + 8);
      n.mtime_ns = Get<int64_t>(rec + 16);
      n.link = Get<uint32_t>(rec + 24);
      const size_t name = Get<uint16_t>(rec + 28), target = Get<uint16_t>(rec + 30);
      if (static_cast<size_t>(end - str) < name + target)
        return Status::Corruption("image: the tree's names run past its end");
      n.name = std::string_view(str, name);
      n.target = std::string_view(str + name, target);
      str += name + target;
    }
  }
  if (str != end) return Status::Corruption("image: the tree's names do not fill its strings");
  return t;
}

}  // namespace

Result<Tree> ReadTree(int fd, uint64_t max_bytes) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno("image: the tree", errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes || size > max_bytes)
    return Status::Corruption("image: the tree file's " + std::to_string(size) +
                              " bytes are not between a header's and " + std::to_string(max_bytes));
  // A file that shrinks meanwhile fails a read; one that grows is read as it was.
  return Parse(size, [fd](uint64_t off, size_t len, char* dst) {
    return PreadFull(fd, dst, len, static_cast<off_t>(off), "image: the tree");
  });
}

Result<Tree> ParseTree(const std::vector<char>& bytes) {
  return Parse(bytes.size(), [&bytes](uint64_t off, size_t len, char* dst) {
    if (off > bytes.size() || len > bytes.size() - off)
      return Status::Corruption("image: the tree file is shorter than its header says");
    if (len) std::memcpy(dst, bytes.data() + off, len);
    return Status::OK();
  });
}

Status MountTree(const MountRequest& req) {
  if (req.owner == kNoOwner) return Status::InvalidArgument("image: no owner given");
  struct stat tree_st, blob_st;
  FS_RETURN_IF_ERROR(Regular(req.tree_fd, req.owner, "tree file", &tree_st));
  FS_RETURN_IF_ERROR(Regular(req.blob_fd, req.owner, "blob", &blob_st));
  FS_RETURN_IF_ERROR(RootsDirectory(req.meta_dir_fd));
  const auto t0 = SteadyClock::now();
  auto tree = ReadTree(req.tree_fd);
  if (!tree.ok()) return tree.status();
  const double read_s = SecondsSince(t0);
  const size_t names = tree->nodes.size();
  Options opts;
  opts.uid = req.owner;
  opts.gid = req.group;
  auto img = ErofsImage::Plan(std::move(tree->nodes), opts, tree->blob_order);
  if (!img.ok()) return img.status();
  const double plan_s = SecondsSince(t0);
  if (img->blob_size() != tree->blob_size)
    return Status::Corruption("image: the tree's files take " + std::to_string(img->blob_size()) +
                              " bytes of blob, not the " + std::to_string(tree->blob_size) +
                              " it says");
  if (static_cast<uint64_t>(blob_st.st_size) < img->blob_size())
    return Status::Corruption("image: the blob holds " + std::to_string(blob_st.st_size) +
                              " bytes, short of its files' " + std::to_string(img->blob_size()));
  // A name costs a block of metadata at most when it is a directory or a symlink: bounded by the
  // tree's size, and by what the job could have written there itself.
  const uint64_t bound = (uint64_t{64} << 20) + 24 * tree->file_bytes;
  struct statfs fs;
  if (img->meta_size() > bound)
    return Status::InvalidArgument("image: its metadata would take " +
                                   std::to_string(img->meta_size()) + " bytes, over " +
                                   std::to_string(bound) + " for a tree of its size");
  if (::fstatfs(req.meta_dir_fd, &fs) == 0 &&
      img->meta_size() > static_cast<uint64_t>(fs.f_bavail) * fs.f_bsize)
    return Status::NoSpace("image: its metadata (" + std::to_string(img->meta_size()) +
                           " bytes) would not fit the space left to users");
  UniqueFD meta(::openat(req.meta_dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!meta.valid()) return Status::FromErrno("image: an unnamed file for the metadata", errno);
  FS_RETURN_IF_ERROR(img->WriteMeta(meta.get()));
  const double write_s = SecondsSince(t0);
  // Through the descriptors: the kernel reads this metadata and the blob just checked, whatever
  // the paths name by then, and mounts on the directory the caller opened.
  const std::string source = "/proc/self/fd/" + std::to_string(meta.get());
  const std::string options = "device=/proc/self/fd/" + std::to_string(req.blob_fd);
  const std::string target = "/proc/self/fd/" + std::to_string(req.target_fd);
  if (::mount(source.c_str(), target.c_str(), "erofs", MS_RDONLY | MS_NOSUID | MS_NODEV,
              options.c_str()) != 0)
    return Status::FromErrno("image: mount it", errno);
  LOG_DEBUG(
      "image: %zu names; tree read in %.2f s, planned in %.2f s, %llu bytes of metadata "
      "written in %.2f s, mounted in %.2f s",
      names, read_s, plan_s - read_s, static_cast<unsigned long long>(img->meta_size()),
      write_s - plan_s, SecondsSince(t0) - write_s);
  return Status::OK();
}

}  // namespace fanstore::image
