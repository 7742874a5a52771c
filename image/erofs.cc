#include "image/erofs.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "common/io.h"

namespace fanstore::image {
namespace {

// The on-disk format (the kernel's fs/erofs/erofs_fs.h), as offsets and values.
constexpr uint32_t kMagic = 0xE0F5E1E2;
constexpr uint64_t kSuperOffset = 1024;
constexpr uint64_t kSlotOffset = kSuperOffset + 128;  // the device table right after it
constexpr uint64_t kHeaderEnd = kSlotOffset + 128;
constexpr uint32_t kIncompatChunkedFile = 0x4, kIncompatDeviceTable = 0x8;
constexpr uint16_t kLayoutFlatPlain = 0, kLayoutChunkBased = 4;
constexpr uint16_t kChunkIndexes = 0x20;
constexpr uint32_t kInodeBytes = 64, kChunkIndexBytes = 8, kSlotBytes = 32, kDirentBytes = 12;
constexpr uint8_t kFtReg = 1, kFtDir = 2, kFtSymlink = 7;
constexpr size_t kNameMax = 255, kTargetMax = 4095;
constexpr unsigned kMaxChunkBits = 31;  // EROFS_CHUNK_FORMAT_BLKBITS_MASK

void Put16(char* p, uint16_t v) {
  for (int i = 0; i < 2; i++) p[i] = static_cast<char>(v >> (8 * i));
}
void Put32(char* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<char>(v >> (8 * i));
}
void Put64(char* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = static_cast<char>(v >> (8 * i));
}

uint64_t Blocks(uint64_t bytes, unsigned bits) {
  return (bytes + (uint64_t{1} << bits) - 1) >> bits;
}

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > ~uint64_t{0} - b ? ~uint64_t{0} : a + b; }

constexpr uint64_t kNoWhere = ~uint64_t{0};

bool IsRegular(const Node& n) { return S_ISREG(n.mode) && n.link == kNone; }

// An inode's record: 64 bytes, and a regular file with bytes its 8-byte chunk index (in 32-byte
// slots: 96). Records never cross 512 bytes, so that none crosses a block of either size: the
// nids do not depend on the block size, which Check chooses only once it has seen every file.
constexpr uint64_t kRecordAlign = 512;
uint64_t RecordBytes(const Node& x) { return IsRegular(x) && x.size > 0 ? 96 : kInodeBytes; }

// Sequential writes of one region of the image, [start, end), through a buffer: Put(offset,
// bytes) with offsets that only grow; the gaps are zeros.
class Out {
 public:
  Out(int fd, uint64_t start, uint64_t end) : fd_(fd), pos_(start), end_(end) {}
  Status Put(uint64_t off, std::string_view bytes) {
    if (off < pos_ + buf_.size() || off > end_ || bytes.size() > end_ - off)
      return Status::InvalidArgument("erofs image: a write out of order or out of its region");
    buf_.append(off - pos_ - buf_.size(), '\0');
    buf_.append(bytes);
    return buf_.size() >= (1u << 20) ? Flush() : Status::OK();
  }
  Status Flush() {
    Status st = PwriteFull(fd_, buf_, pos_, "erofs image");
    pos_ += buf_.size();
    buf_.clear();
    return st;
  }

 private:
  int fd_;
  uint64_t pos_, end_;
  std::string buf_;
};

// A directory's entries packed into blocks of `bsize`, a block at a time: dirents first, then
// the names. Without an Out it only counts; with one it writes the blocks from `at`, the last
// one only as far as it is used.
class DirPacker {
 public:
  DirPacker(uint32_t bsize, Out* out = nullptr, uint64_t at = 0)
      : bsize_(bsize), out_(out), at_(at) {}
  Status Add(std::string_view name, uint64_t nid, uint8_t type) {
    const uint32_t need = kDirentBytes + static_cast<uint32_t>(name.size());
    if (used_ + need > bsize_) FS_RETURN_IF_ERROR(Flush(true));
    used_ += need;
    if (out_) {
      ents_.push_back({nid, static_cast<uint32_t>(name.size()), type});
      names_.append(name);
    }
    return Status::OK();
  }
  // The directory's size: whole blocks, then the last one's use.
  Result<uint64_t> Finish() {
    const uint64_t size = blocks_ * bsize_ + used_;
    FS_RETURN_IF_ERROR(Flush(false));
    return size;
  }

 private:
  struct Ent {
    uint64_t nid;
    uint32_t len;
    uint8_t type;
  };
  Status Flush(bool full) {
    blocks_++;
    if (out_) {
      std::string b(full ? bsize_ : used_, '\0');
      uint32_t nameoff = static_cast<uint32_t>(ents_.size() * kDirentBytes), from = 0;
      for (size_t k = 0; k < ents_.size(); k++) {
        char* d = b.data() + k * kDirentBytes;
        Put64(d, ents_[k].nid);
        Put16(d + 8, static_cast<uint16_t>(nameoff));
        d[10] = static_cast<char>(ents_[k].type);
        std::memcpy(b.data() + nameoff, names_.data() + from, ents_[k].len);
        nameoff += ents_[k].len;
        from += ents_[k].len;
      }
      FS_RETURN_IF_ERROR(out_->Put(at_, b));
      at_ += bsize_;
      ents_.clear();
      names_.clear();
    }
    used_ = 0;
    return Status::OK();
  }

  uint32_t bsize_;
  Out* out_;
  uint64_t at_, blocks_ = 0;
  uint32_t used_ = 0;
  std::vector<Ent> ents_;
  std::string names_;
};

// One directory's entries in byte order: its children's, as they come (sorted), with "." and
// ".." inserted where they sort (no child is named either), handed to `add`.
class DirEntries {
 public:
  using AddFn = std::function<Status(std::string_view, uint64_t nid, uint8_t type)>;
  DirEntries(uint64_t self, uint64_t parent, AddFn add)
      : self_(self), parent_(parent), add_(std::move(add)) {}
  Status Child(std::string_view name, uint64_t nid, uint8_t type) {
    FS_RETURN_IF_ERROR(Dots(name));
    return add_(name, nid, type);
  }
  Status End() { return Dots({}); }

 private:
  Status Dots(std::string_view before) {  // empty: the end
    if (!dot_ && (before.empty() || std::string_view(".") < before)) {
      dot_ = true;
      FS_RETURN_IF_ERROR(add_(".", self_, kFtDir));
    }
    if (!dotdot_ && (before.empty() || std::string_view("..") < before)) {
      dotdot_ = true;
      FS_RETURN_IF_ERROR(add_("..", parent_, kFtDir));
    }
    return Status::OK();
  }
  uint64_t self_, parent_;
  AddFn add_;
  bool dot_ = false, dotdot_ = false;
};

uint8_t FileType(const Node& x) {
  return S_ISDIR(x.mode) ? kFtDir : S_ISLNK(x.mode) ? kFtSymlink : kFtReg;
}

}  // namespace

// The one walk over a tree in canonical order that the plan and the writing make: every node in
// order (Node), and each directory's entries once its children are seen (Begin, Child, End),
// in node order of the directories. It checks what it relies on: parents before their
// children, never decreasing, directories.
template <typename H>
Status Walk(NodeCursor* cur, uint64_t n, const std::vector<bool>& dir, H* h) {
  uint64_t i = 0, next = 0;  // every directory below `next` has ended (or is `open`)
  int64_t open = -1;
  auto end_below = [&](uint64_t p) -> Status {
    if (open >= 0) {
      FS_RETURN_IF_ERROR(h->End(static_cast<uint32_t>(open)));
      next = static_cast<uint64_t>(open) + 1;
      open = -1;
    }
    for (; next < p; next++)
      if (dir[next]) {
        FS_RETURN_IF_ERROR(h->Begin(static_cast<uint32_t>(next)));
        FS_RETURN_IF_ERROR(h->End(static_cast<uint32_t>(next)));
      }
    return Status::OK();
  };
  uint32_t last_parent = 0;
  for (;; i++) {
    auto x = cur->Next();
    if (!x.ok()) return x.status();
    if (*x == nullptr) break;
    const Node& node = **x;
    if (i >= n) return Status::InvalidArgument("more names than the tree says");
    if (i > 0 && (node.parent >= i || node.parent < last_parent || !dir[node.parent]))
      return Status::InvalidArgument(
          "name " + std::to_string(i) +
          (node.parent >= i || dir[node.parent]
               ? ": not in breadth-first order (a parent after its child, or parents out of order)"
               : ": its parent is not a directory"));
    FS_RETURN_IF_ERROR(h->Node(static_cast<uint32_t>(i), node));
    if (i == 0) continue;
    if (static_cast<int64_t>(node.parent) != open) {
      FS_RETURN_IF_ERROR(end_below(node.parent));
      FS_RETURN_IF_ERROR(h->Begin(node.parent));
      open = node.parent;
    }
    last_parent = node.parent;
    FS_RETURN_IF_ERROR(h->Child(static_cast<uint32_t>(i), node));
  }
  if (i != n) return Status::InvalidArgument("fewer names than the tree says");
  return end_below(n);
}

// The plan's pass: checks each node, gives it its nid, and counts each directory's bytes for
// both block sizes (the size is chosen once every file is seen).
class ErofsImage::Pass {
 public:
  explicit Pass(ErofsImage* img) : img_(img) {}

  Status Node(uint32_t i, const image::Node& x) {
    ErofsImage& m = *img_;
    auto bad = [i](const char* why) {
      return Status::InvalidArgument("name " + std::to_string(i) + ": " + why);
    };
    if (i == 0) {
      if (!S_ISDIR(x.mode) || x.parent != 0 || x.link != kNone)
        return Status::InvalidArgument("node 0 is not a root directory");
    } else {
      // Two scans of the name (find_first_of would call memchr once per byte of it).
      if (x.name.empty() || x.name.size() > kNameMax || x.name == "." || x.name == ".." ||
          x.name.find('/') != std::string_view::npos || x.name.find('\0') != std::string_view::npos)
        return bad("not a valid file name");
      if (x.parent == prev_parent_ && !(prev_name_ < x.name))
        return Status::InvalidArgument(
            "\"" + std::string(x.name) + "\" " +
            (prev_name_ == x.name ? "twice in directory " : "out of order in directory ") +
            std::to_string(x.parent));
      prev_parent_ = x.parent;
      prev_name_.assign(x.name);
    }
    if (x.link != kNone) {
      if (!S_ISREG(x.mode)) return bad("a hard link to something other than a regular file");
      m.links_.emplace_back(i, x.link);  // checked once every node is seen
      return Status::OK();
    }
    if (S_ISLNK(x.mode)) {
      if (x.target.empty() || x.target.size() > kTargetMax ||
          x.target.find('\0') != std::string_view::npos)
        return bad("not a valid symlink target");
      m.where_[i] = x.target.size();  // its blocks are placed once the size is chosen
    } else if (S_ISREG(x.mode)) {
      if (x.size > (uint64_t{1} << (12 + kMaxChunkBits))) return bad("too large");
      m.reg_[i] = true;
      if (x.size > 0) {
        m.file_[i] = true;
        m.where_[i] = x.size;
        blocks9_ = SatAdd(blocks9_, Blocks(x.size, 9));
        blocks12_ = SatAdd(blocks12_, Blocks(x.size, 12));
        max_size_ = std::max(max_size_, x.size);
      }
    } else if (S_ISDIR(x.mode)) {
      m.dir_[i] = true;
      m.dirs_.push_back({0, x.parent, 0});
    } else {
      return bad("neither a directory, a regular file nor a symlink");
    }
    const uint64_t rec = RecordBytes(x);
    if (pos_ % kRecordAlign + rec > kRecordAlign) pos_ = (pos_ / kRecordAlign + 1) * kRecordAlign;
    if (pos_ / kSlotBytes >= kNone) return Status::InvalidArgument("too many inodes for an image");
    m.nid_[i] = static_cast<uint32_t>(pos_ / kSlotBytes);
    pos_ += rec;
    m.inodes_++;
    return Status::OK();
  }
  Status Begin(uint32_t) {
    p9_ = DirPacker(512);
    p12_ = DirPacker(4096);
    subdirs_ = 0;
    entries_.emplace(0, 0, [this](std::string_view name, uint64_t, uint8_t) {
      FS_RETURN_IF_ERROR(p9_.Add(name, 0, 0));
      return p12_.Add(name, 0, 0);
    });
    return Status::OK();
  }
  Status Child(uint32_t, const image::Node& x) {
    subdirs_ += S_ISDIR(x.mode) && x.link == kNone;
    return entries_->Child(x.name, 0, 0);
  }
  Status End(uint32_t dir) {
    FS_RETURN_IF_ERROR(entries_->End());
    Dir& d = img_->dirs_[ended_++];
    auto s9 = p9_.Finish(), s12 = p12_.Finish();
    if (!s9.ok()) return s9.status();
    if (!s12.ok()) return s12.status();
    img_->where_[dir] = *s9;
    d.size = *s12;
    d.subdirs = subdirs_;
    return Status::OK();
  }

  uint64_t inode_bytes() const { return pos_; }
  uint64_t blocks9_ = 0, blocks12_ = 0, max_size_ = 0;

 private:
  ErofsImage* img_;
  uint64_t pos_ = kSlotBytes;  // from the metadata area's start: the root is not at nid 0
  uint32_t prev_parent_ = kNone, subdirs_ = 0;
  std::string prev_name_;
  size_t ended_ = 0;
  DirPacker p9_{512}, p12_{4096};
  std::optional<DirEntries> entries_;
};

Result<ErofsImage> ErofsImage::PlanSorted(std::shared_ptr<const NodeSource> src,
                                          const Options& opts) {
  ErofsImage img;
  img.src_ = std::move(src);
  img.opts_ = opts;
  if (Status st = img.Check(); !st.ok()) return st.Prefixed("erofs image");
  if (img.opts_.build_time_ns == 0)
    img.opts_.build_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  return img;
}

Status ErofsImage::Check() {
  const uint64_t n = src_->size();
  if (n == 0 || n >= kNone) return Status::InvalidArgument("no root, or too many names");
  nodes_ = n;
  nid_.assign(n, 0);
  where_.assign(n, kNoWhere);
  dir_.assign(n, false);
  reg_.assign(n, false);
  file_.assign(n, false);
  Pass pass(this);
  auto cur = src_->Nodes();
  FS_RETURN_IF_ERROR(Walk(cur.get(), n, dir_, &pass));
  cur.reset();
  // Hard links: to a regular file, named by its nid; each file's count of other names.
  link_targets_.reserve(links_.size());
  for (const auto& [l, t] : links_) {
    if (t >= n || !reg_[t])
      return Status::InvalidArgument("name " + std::to_string(l) +
                                     ": a hard link to something other than a regular file");
    nid_[l] = nid_[t];
    link_targets_.push_back(t);
  }
  std::vector<std::pair<uint32_t, uint32_t>>().swap(links_);
  std::sort(link_targets_.begin(), link_targets_.end());
  // The block size, and whether the files fit it: a chunk's start and the device's size are
  // 32-bit block numbers.
  block_bits_ = opts_.block_bits ? opts_.block_bits : BlockBitsFor(pass.blocks9_);
  if (block_bits_ != 9 && block_bits_ != 12)
    return Status::InvalidArgument("block size must be 512 B or 4 KiB");
  if (pass.max_size_ > (uint64_t{1} << (block_bits_ + kMaxChunkBits)))
    return Status::InvalidArgument("a file too large for the block size");
  if ((block_bits_ == 9 ? pass.blocks9_ : pass.blocks12_) >= kNone)
    return Status::InvalidArgument("the files take more blocks than an image can address");
  // The metadata: the inodes, then the directories' blocks, then the symlinks', each in node
  // order, which is the order the writing reaches them in.
  meta_blkaddr_ = Blocks(kHeaderEnd, block_bits_);
  uint64_t blk = meta_blkaddr_ + Blocks(pass.inode_bytes(), block_bits_);
  dirs_blk_ = blk;
  for (uint64_t i = 0, d = 0; i < n; i++)
    if (dir_[i]) {
      Dir& x = dirs_[d++];
      if (block_bits_ == 9) x.size = where_[i];
      where_[i] = blk;
      blk += Blocks(x.size, block_bits_);
    }
  links_blk_ = blk;
  for (uint64_t i = 0; i < n; i++)
    if (where_[i] != kNoWhere && !dir_[i] && !reg_[i]) {  // a symlink: its target's length
      const uint64_t len = where_[i];
      where_[i] = blk;
      blk += Blocks(len, block_bits_);
    }
  meta_blocks_ = blk;
  if (meta_blocks_ >= kNone)  // directories and symlinks' blocks are 32-bit numbers too
    return Status::InvalidArgument("more metadata than an image can address");
  return PlaceBlob();
}

// Each file's extent in the blob: in the source's blob order, then the rest in node order.
Status ErofsImage::PlaceBlob() {
  placed_.assign(nodes_, false);
  auto place = [&](uint32_t i) {
    if (i >= nodes_ || !file_[i] || placed_[i]) return;
    const uint64_t size = where_[i];
    where_[i] = blob_blocks_ << block_bits_;
    blob_blocks_ += BlobExtent(size, block_bits_) >> block_bits_;
    placed_[i] = true;
  };
  FS_RETURN_IF_ERROR(src_->BlobOrder(place));
  for (uint32_t i = 0; i < nodes_; i++) place(i);
  std::vector<bool>().swap(placed_);
  return Status::OK();
}

uint64_t ErofsImage::BlobOffset(uint32_t node) const {
  if (node >= nodes_) return kNone;
  const uint32_t i = Id(node);
  return file_[i] ? where_[i] : kNone;
}

// The writing's pass: each inode in node order, each directory's blocks once its children are
// seen, each symlink's target in node order: three regions, each written front to back.
class ErofsImage::Writer {
 public:
  Writer(const ErofsImage& img, int fd)
      : m_(img),
        inodes_(fd, 0, img.dirs_blk_ << img.block_bits_),
        dirs_(fd, img.dirs_blk_ << img.block_bits_, img.links_blk_ << img.block_bits_),
        links_(fd, img.links_blk_ << img.block_bits_, img.meta_size()) {}

  Status Header() {
    const ErofsImage& m = m_;
    char sb[128] = {};
    Put32(sb, kMagic);
    sb[12] = static_cast<char>(m.block_bits_);
    Put16(sb + 14, static_cast<uint16_t>(m.nid_[0]));
    Put64(sb + 16, m.inodes_);
    Put64(sb + 24, static_cast<uint64_t>(m.opts_.build_time_ns / 1000000000));
    Put32(sb + 32, static_cast<uint32_t>(m.opts_.build_time_ns % 1000000000));
    Put32(sb + 36, static_cast<uint32_t>(m.meta_blocks_));
    Put32(sb + 40, static_cast<uint32_t>(m.meta_blkaddr_));
    std::memcpy(sb + 64, "fanstore", 8);
    Put32(sb + 80, kIncompatChunkedFile | kIncompatDeviceTable);
    Put16(sb + 86, 1);  // one extra device: the blob
    Put16(sb + 88, static_cast<uint16_t>(kSlotOffset / 128));
    // The device slot: an empty tag, so that a mount without device= fails instead of opening
    // whatever path a tag named; the blob's blocks.
    char slot[128] = {};
    Put32(slot + 64, static_cast<uint32_t>(m.blob_blocks_));
    FS_RETURN_IF_ERROR(inodes_.Put(kSuperOffset, std::string_view(sb, sizeof sb)));
    return inodes_.Put(kSlotOffset, std::string_view(slot, sizeof slot));
  }

  Status Node(uint32_t i, const image::Node& x) {
    const ErofsImage& m = m_;
    // The node as it was planned (the source is root's own copy: a difference is a bug).
    const bool symlink = S_ISLNK(x.mode) && x.link == kNone;
    if (S_ISDIR(x.mode) != m.dir_[i] || IsRegular(x) != m.reg_[i] ||
        (IsRegular(x) && x.size > 0) != m.file_[i] ||
        symlink != (!m.dir_[i] && !m.reg_[i] && m.where_[i] != kNoWhere))
      return Status::InvalidArgument("the tree changed between its plan and its writing");
    if (x.link != kNone) return Status::OK();
    const bool chunked = m.file_[i];
    char p[kInodeBytes + kChunkIndexBytes] = {};
    uint64_t size = x.size;
    uint32_t nlink = 1;
    if (S_ISDIR(x.mode)) {
      const Dir& d = m.dirs_[inode_dir_++];
      size = d.size;
      nlink = 2 + d.subdirs;
    } else if (S_ISLNK(x.mode)) {
      size = x.target.size();
      FS_RETURN_IF_ERROR(links_.Put(m.where_[i] << m.block_bits_, x.target));
    } else {
      while (next_link_ < m.link_targets_.size() && m.link_targets_[next_link_] <= i)
        nlink += m.link_targets_[next_link_++] == i;
    }
    Put16(p, static_cast<uint16_t>(
                 1 | ((chunked ? kLayoutChunkBased : kLayoutFlatPlain) << 1)));  // extended
    // Type and permissions; never set-user-ID or set-group-ID (the mount is nosuid besides).
    Put16(p + 4, static_cast<uint16_t>((x.mode & S_IFMT) | (x.mode & 01777)));
    Put64(p + 8, size);
    if (chunked) {
      unsigned extra = 0;  // one chunk holds the whole file
      while ((uint64_t{1} << (m.block_bits_ + extra)) < x.size) extra++;
      Put16(p + 16, static_cast<uint16_t>(kChunkIndexes | extra));
      Put16(p + kInodeBytes + 2, 1);  // device 1: the blob
      Put32(p + kInodeBytes + 4, static_cast<uint32_t>(m.where_[i] >> m.block_bits_));
    } else if (!S_ISREG(x.mode)) {
      Put32(p + 16, static_cast<uint32_t>(m.where_[i]));
    }
    Put32(p + 20, i + 1);
    Put32(p + 24, m.opts_.uid);
    Put32(p + 28, m.opts_.gid);
    int64_t sec = x.mtime_ns / 1000000000, nsec = x.mtime_ns % 1000000000;
    if (nsec < 0) {
      sec--;
      nsec += 1000000000;
    }
    Put64(p + 32, static_cast<uint64_t>(sec));
    Put32(p + 40, static_cast<uint32_t>(nsec));
    Put32(p + 44, nlink);
    const uint64_t base = m.meta_blkaddr_ << m.block_bits_;
    return inodes_.Put(base + uint64_t{m.nid_[i]} * kSlotBytes,
                       std::string_view(p, chunked ? sizeof p : kInodeBytes));
  }
  Status Begin(uint32_t d) {
    const ErofsImage& m = m_;
    packer_.emplace(m.BlockSize(), &dirs_, m.where_[d] << m.block_bits_);
    entries_.emplace(m.nid_[d], m.nid_[m.dirs_[ended_].parent],
                     [this](std::string_view name, uint64_t nid, uint8_t type) {
                       return packer_->Add(name, nid, type);
                     });
    return Status::OK();
  }
  Status Child(uint32_t i, const image::Node& x) {
    return entries_->Child(x.name, m_.nid_[i], x.link != kNone ? kFtReg : FileType(x));
  }
  Status End(uint32_t) {
    FS_RETURN_IF_ERROR(entries_->End());
    auto size = packer_->Finish();
    if (!size.ok()) return size.status();
    if (*size != m_.dirs_[ended_++].size)
      return Status::InvalidArgument("the tree changed between its plan and its writing");
    return Status::OK();
  }
  Status Finish() {
    const ErofsImage& m = m_;
    FS_RETURN_IF_ERROR(inodes_.Put(m.dirs_blk_ << m.block_bits_, ""));
    FS_RETURN_IF_ERROR(inodes_.Flush());
    FS_RETURN_IF_ERROR(dirs_.Put(m.links_blk_ << m.block_bits_, ""));
    FS_RETURN_IF_ERROR(dirs_.Flush());
    FS_RETURN_IF_ERROR(links_.Put(m.meta_size(), ""));
    return links_.Flush();
  }

 private:
  const ErofsImage& m_;
  Out inodes_, dirs_, links_;
  size_t inode_dir_ = 0, ended_ = 0, next_link_ = 0;
  std::optional<DirPacker> packer_;
  std::optional<DirEntries> entries_;
};

Status ErofsImage::WriteMeta(int fd) const {
  Writer w(*this, fd);
  FS_RETURN_IF_ERROR(w.Header());
  auto cur = src_->Nodes();
  Status st = Walk(cur.get(), nodes_, dir_, &w);
  return st.ok() ? w.Finish() : st.Prefixed("erofs image");
}

}  // namespace fanstore::image
