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

Status WriteTree(int fd, const EmitNodes& nodes, const std::vector<uint32_t>& blob_order,
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

Result<std::shared_ptr<TreeFile>> TreeFile::Open(uint64_t size, ReadFn read) {
  auto t = std::make_shared<TreeFile>();
  t->read_ = std::move(read);
  t->file_bytes_ = size;
  if (size < kHeaderBytes)
    return Status::Corruption("image: the tree file is shorter than a header");
  char h[kHeaderBytes];
  FS_RETURN_IF_ERROR(t->read_(0, kHeaderBytes, h));
  if (std::memcmp(h, kTreeMagic, sizeof kTreeMagic) != 0)
    return Status::Corruption("image: not a tree file");
  t->nodes_ = Get<uint32_t>(h + 8);
  t->order_ = Get<uint32_t>(h + 12);
  if (t->nodes_ > kMaxTreeNodes)
    return Status::Corruption("image: the tree has " + std::to_string(t->nodes_) +
                              " names, more than " + std::to_string(kMaxTreeNodes));
  t->strings_ = Get<uint64_t>(h + 16);
  t->blob_size_ = Get<uint64_t>(h + 24);
  // Each term is below 2^38, so the sum cannot wrap.
  if (t->strings_ > size ||
      kHeaderBytes + t->nodes_ * kRecordBytes + t->order_ * 4 + t->strings_ != size)
    return Status::Corruption("image: the tree file's size does not match its header");
  return t;
}

// A pass over the records, a MiB at a time, and beside them over the names they take in turn.
class TreeFile::Cursor final : public NodeCursor {
 public:
  explicit Cursor(const TreeFile& t)
      : t_(t), strings_at_(kHeaderBytes + t.nodes_ * kRecordBytes + t.order_ * 4) {}

  Result<const Node*> Next() override {
    if (i_ == t_.nodes_) {
      if (str_read_ != t_.strings_ || str_at_ != str_.size())
        return Status::Corruption("image: the tree's names do not fill its strings");
      return nullptr;
    }
    if (rec_at_ == rec_.size()) {
      const uint64_t k = std::min<uint64_t>(kChunk / kRecordBytes, t_.nodes_ - i_);
      rec_.resize(k * kRecordBytes);
      FS_RETURN_IF_ERROR(t_.read_(kHeaderBytes + i_ * kRecordBytes, rec_.size(), rec_.data()));
      rec_at_ = 0;
    }
    const char* rec = rec_.data() + rec_at_;
    rec_at_ += kRecordBytes;
    node_.parent = Get<uint32_t>(rec);
    node_.mode = Get<uint32_t>(rec + 4);
    node_.size = Get<uint64_t>(rec + 8);
    node_.mtime_ns = Get<int64_t>(rec + 16);
    node_.link = Get<uint32_t>(rec + 24);
    const size_t name = Get<uint16_t>(rec + 28), target = Get<uint16_t>(rec + 30);
    FS_RETURN_IF_ERROR(Strings(name + target));
    node_.name = std::string_view(str_.data() + str_at_, name);
    node_.target = std::string_view(str_.data() + str_at_ + name, target);
    str_at_ += name + target;
    i_++;
    return &node_;
  }

 private:
  static constexpr uint64_t kChunk = 1u << 20;
  // At least `need` bytes of names from str_at_ in str_ (at most 2 x 64 KiB: a name and a target).
  Status Strings(size_t need) {
    if (str_.size() - str_at_ >= need) return Status::OK();
    if (need - (str_.size() - str_at_) > t_.strings_ - str_read_)
      return Status::Corruption("image: the tree's names run past its end");
    str_.erase(0, str_at_);
    str_at_ = 0;
    const uint64_t k =
        std::min<uint64_t>(std::max<uint64_t>(kChunk, need - str_.size()), t_.strings_ - str_read_);
    const size_t had = str_.size();
    str_.resize(had + k);
    FS_RETURN_IF_ERROR(t_.read_(strings_at_ + str_read_, k, str_.data() + had));
    str_read_ += k;
    return Status::OK();
  }

  const TreeFile& t_;
  const uint64_t strings_at_;
  uint64_t i_ = 0, str_read_ = 0;
  std::string rec_, str_;
  size_t rec_at_ = 0, str_at_ = 0;
  Node node_;
};

std::unique_ptr<NodeCursor> TreeFile::Nodes() const { return std::make_unique<Cursor>(*this); }

Status TreeFile::BlobOrder(const std::function<void(uint32_t)>& fn) const {
  constexpr uint64_t kChunk = 1u << 16;
  std::vector<uint32_t> chunk;
  for (uint64_t i = 0; i < order_; i += kChunk) {
    chunk.resize(std::min(kChunk, order_ - i));
    FS_RETURN_IF_ERROR(read_(kHeaderBytes + nodes_ * kRecordBytes + i * 4, chunk.size() * 4,
                             reinterpret_cast<char*>(chunk.data())));
    for (uint32_t x : chunk) fn(x);
  }
  return Status::OK();
}

Result<std::shared_ptr<TreeFile>> ReadTree(int fd, uint64_t max_bytes) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno("image: the tree", errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes || size > max_bytes)
    return Status::Corruption("image: the tree file's " + std::to_string(size) +
                              " bytes are not between a header's and " + std::to_string(max_bytes));
  return TreeFile::Open(size, [fd](uint64_t off, size_t len, char* dst) {
    return PreadFull(fd, dst, len, static_cast<off_t>(off), "image: the tree");
  });
}

Result<std::shared_ptr<TreeFile>> ParseTree(std::vector<char> bytes) {
  auto b = std::make_shared<const std::vector<char>>(std::move(bytes));
  return TreeFile::Open(b->size(), [b](uint64_t off, size_t len, char* dst) {
    if (off > b->size() || len > b->size() - off)
      return Status::Corruption("image: the tree file is shorter than its header says");
    if (len) std::memcpy(dst, b->data() + off, len);
    return Status::OK();
  });
}

namespace {

// Root's own copy of the job user's tree file (`size` bytes by its fstat), unnamed, in root's
// directory: the plan reads the tree twice, and what it checked the first time must be what it
// writes from. A file past the cap, or past the space users may still use there, is refused
// before any byte is copied (a sparse one would be copied whole).
Result<UniqueFD> CopyTree(int from, uint64_t size, int dir) {
  const Status too_large = Status::Corruption("image: the tree file is larger than " +
                                              std::to_string(kMaxTreeBytes) + " bytes");
  if (size > kMaxTreeBytes) return too_large;
  struct statfs fs;
  if (::fstatfs(dir, &fs) == 0 && size > static_cast<uint64_t>(fs.f_bavail) * fs.f_bsize)
    return Status::NoSpace("image: a copy of the tree (" + std::to_string(size) +
                           " bytes) would not fit the space left to users");
  UniqueFD to(::openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!to.valid()) return Status::FromErrno("image: an unnamed file for the tree", errno);
  uint64_t copied = 0;
  loff_t in = 0;
  bool in_kernel = true;
  std::vector<char> buf;
  for (;;) {
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(kMaxTreeBytes + 1 - copied, 1u << 30));
    ssize_t k = in_kernel ? ::copy_file_range(from, &in, to.get(), nullptr, want, 0) : -1;
    if (k < 0 && in_kernel && copied == 0 &&
        (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
      in_kernel = false;  // across file systems (or none): through a buffer
    if (!in_kernel) {
      buf.resize(1u << 20);
      k = ::pread(from, buf.data(), std::min(want, buf.size()), in);
      if (k > 0) {
        FS_RETURN_IF_ERROR(
            WriteFull(to.get(), buf.data(), static_cast<size_t>(k), "image: the tree's copy"));
        in += k;
      }
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return Status::FromErrno("image: copy the tree", errno);
    if (k == 0) return to;
    copied += static_cast<uint64_t>(k);
    if (copied > kMaxTreeBytes) return too_large;
  }
}

}  // namespace

Status MountTree(const MountRequest& req) {
  if (req.owner == kNoOwner) return Status::InvalidArgument("image: no owner given");
  struct stat tree_st, blob_st;
  FS_RETURN_IF_ERROR(Regular(req.tree_fd, req.owner, "tree file", &tree_st));
  FS_RETURN_IF_ERROR(Regular(req.blob_fd, req.owner, "blob", &blob_st));
  FS_RETURN_IF_ERROR(RootsDirectory(req.meta_dir_fd));
  const auto t0 = SteadyClock::now();
  auto copy = CopyTree(req.tree_fd, static_cast<uint64_t>(tree_st.st_size), req.meta_dir_fd);
  if (!copy.ok()) return copy.status();
  auto tree = ReadTree(copy->get());
  if (!tree.ok()) return tree.status();
  const double read_s = SecondsSince(t0);
  const TreeFile& t = **tree;
  Options opts;
  opts.uid = req.owner;
  opts.gid = req.group;
  auto img = ErofsImage::PlanSorted(*tree, opts);
  if (!img.ok()) return img.status();
  const double plan_s = SecondsSince(t0);
  if (img->blob_size() != t.blob_size())
    return Status::Corruption("image: the tree's files take " + std::to_string(img->blob_size()) +
                              " bytes of blob, not the " + std::to_string(t.blob_size()) +
                              " it says");
  if (static_cast<uint64_t>(blob_st.st_size) < img->blob_size())
    return Status::Corruption("image: the blob holds " + std::to_string(blob_st.st_size) +
                              " bytes, short of its files' " + std::to_string(img->blob_size()));
  // A name costs a block of metadata at most when it is a directory or a symlink: bounded by the
  // tree's size, and by what the job could have written there itself.
  const uint64_t bound = (uint64_t{64} << 20) + 24 * t.file_bytes();
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
      "image: %llu names; tree copied in %.2f s, planned in %.2f s, %llu bytes of metadata "
      "written in %.2f s, mounted in %.2f s",
      static_cast<unsigned long long>(t.size()), read_s, plan_s - read_s,
      static_cast<unsigned long long>(img->meta_size()), write_s - plan_s,
      SecondsSince(t0) - write_s);
  return Status::OK();
}

}  // namespace fanstore::image
