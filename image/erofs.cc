#include "image/erofs.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

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

bool IsRegular(const Node& n) { return S_ISREG(n.mode) && n.link == kNone; }

// Packs a directory's sorted entries into blocks of `bsize`: dirents first, then the names.
// Calls block(first, count) for each block's entries; returns the used bytes of the last block.
template <typename F>
uint32_t PackDirents(const std::vector<std::pair<std::string_view, uint32_t>>& ents, uint32_t bsize,
                     F block) {
  size_t i = 0;
  uint32_t used = 0;
  while (i < ents.size()) {
    size_t j = i;
    used = 0;
    while (j < ents.size() && used + kDirentBytes + ents[j].first.size() <= bsize) {
      used += kDirentBytes + static_cast<uint32_t>(ents[j].first.size());
      j++;
    }
    block(i, j - i);
    i = j;
  }
  return used;
}

// Sequential writes of the image through a buffer: Put(offset, bytes) with offsets that only
// grow; the gaps are zeros.
class Out {
 public:
  explicit Out(int fd) : fd_(fd) {}
  Status Put(uint64_t off, std::string_view bytes) {
    if (off < pos_ + buf_.size())
      return Status::InvalidArgument("erofs image: a write out of order");
    buf_.append(off - pos_ - buf_.size(), '\0');
    buf_.append(bytes);
    return buf_.size() >= (1u << 20) ? Flush() : Status::OK();
  }
  Status Flush() {
    Status st = WriteFull(fd_, buf_.data(), buf_.size(), "erofs image");
    pos_ += buf_.size();
    buf_.clear();
    return st;
  }

 private:
  int fd_;
  uint64_t pos_ = 0;
  std::string buf_;
};

}  // namespace

Result<ErofsImage> ErofsImage::Plan(std::vector<Node> nodes, const Options& opts,
                                    const std::vector<uint32_t>& blob_order) {
  ErofsImage img;
  img.nodes_ = std::move(nodes);
  img.opts_ = opts;
  if (Status st = img.Check(); !st.ok()) return st.Prefixed("erofs image");
  if (img.opts_.build_time_ns == 0)
    img.opts_.build_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  img.Layout(blob_order);
  if (img.meta_blocks_ >= kNone)  // directories and symlinks' blocks are 32-bit numbers too
    return Status::InvalidArgument("erofs image: more metadata than an image can address");
  return img;
}

// The block size (512 B unless the files take 2^32 of them), and whether the files fit it.
Status ErofsImage::ChooseBlockSize(uint64_t blocks9) {
  block_bits_ = opts_.block_bits ? opts_.block_bits : BlockBitsFor(blocks9);
  if (block_bits_ != 9 && block_bits_ != 12)
    return Status::InvalidArgument("block size must be 512 B or 4 KiB");
  uint64_t blocks = 0;
  for (uint32_t i = 1; i < nodes_.size(); i++) {
    if (!IsRegular(nodes_[i])) continue;
    if (nodes_[i].size > (uint64_t{1} << (block_bits_ + kMaxChunkBits)))
      return Status::InvalidArgument("name " + std::to_string(i) +
                                     ": too large for the block size");
    blocks = SatAdd(blocks, Blocks(nodes_[i].size, block_bits_));
  }
  // A chunk's start and the device's size are 32-bit block numbers.
  if (blocks >= kNone)
    return Status::InvalidArgument("the files take more blocks than an image can address");
  return Status::OK();
}

Status ErofsImage::Check() {
  const size_t n = nodes_.size();
  if (n == 0 || n >= kNone) return Status::InvalidArgument("no root, or too many names");
  if (!S_ISDIR(nodes_[0].mode) || nodes_[0].parent != 0 || nodes_[0].link != kNone)
    return Status::InvalidArgument("node 0 is not a root directory");
  std::vector<uint32_t> count(n + 1, 0);
  names_.assign(n, 0);
  subdirs_.assign(n, 0);
  uint64_t blocks9 = 0;
  for (uint32_t i = 1; i < n; i++) {
    const Node& x = nodes_[i];
    auto bad = [i](const char* why) {
      return Status::InvalidArgument("name " + std::to_string(i) + ": " + why);
    };
    if (x.parent >= n || x.parent == i || !S_ISDIR(nodes_[x.parent].mode) ||
        nodes_[x.parent].link != kNone)
      return bad("its parent is not a directory");
    // Two scans of the name (find_first_of would call memchr once per byte of it).
    if (x.name.empty() || x.name.size() > kNameMax || x.name == "." || x.name == ".." ||
        x.name.find('/') != std::string_view::npos || x.name.find('\0') != std::string_view::npos)
      return bad("not a valid file name");
    if (x.link != kNone) {
      if (x.link >= n || !IsRegular(nodes_[x.link]) || !S_ISREG(x.mode))
        return bad("a hard link to something other than a regular file");
      names_[x.link]++;
    } else if (S_ISLNK(x.mode)) {
      if (x.target.empty() || x.target.size() > kTargetMax ||
          x.target.find('\0') != std::string_view::npos)
        return bad("not a valid symlink target");
    } else if (S_ISREG(x.mode)) {
      if (x.size > (uint64_t{1} << (12 + kMaxChunkBits))) return bad("too large");
      blocks9 = SatAdd(blocks9, Blocks(x.size, 9));
    } else if (S_ISDIR(x.mode)) {
      subdirs_[x.parent]++;
    } else {
      return bad("neither a directory, a regular file nor a symlink");
    }
    count[x.parent + 1]++;
  }
  FS_RETURN_IF_ERROR(ChooseBlockSize(blocks9));
  // Children by parent, sorted by name; a name twice in a directory is refused.
  for (size_t i = 1; i <= n; i++) count[i] += count[i - 1];
  child_start_ = count;
  children_.assign(n - 1, 0);
  for (uint32_t i = 1; i < n; i++) children_[count[nodes_[i].parent]++] = i;
  for (uint32_t d = 0; d < n; d++) {
    auto first = children_.begin() + child_start_[d],
         last = children_.begin() + child_start_[d + 1];
    auto by_name = [&](uint32_t a, uint32_t b) { return nodes_[a].name < nodes_[b].name; };
    if (!std::is_sorted(first, last, by_name)) std::sort(first, last, by_name);
    for (auto it = first; it != last && it + 1 != last; ++it)
      if (nodes_[*it].name == nodes_[*(it + 1)].name)
        return Status::InvalidArgument("\"" + std::string(nodes_[*it].name) +
                                       "\" twice in directory " + std::to_string(d));
  }
  // Every node reachable from the root: parent links that loop leave their nodes unreached.
  std::deque<uint32_t> todo{0};
  size_t reached = 1;
  while (!todo.empty()) {
    const uint32_t d = todo.front();
    todo.pop_front();
    for (uint32_t k = child_start_[d]; k < child_start_[d + 1]; k++) {
      reached++;
      if (S_ISDIR(nodes_[children_[k]].mode)) todo.push_back(children_[k]);
    }
  }
  if (reached != n)
    return Status::InvalidArgument("names not reachable from the root (a loop of parents)");
  return Status::OK();
}

std::vector<std::pair<std::string_view, uint32_t>> ErofsImage::Entries(uint32_t dir) const {
  std::vector<std::pair<std::string_view, uint32_t>> ents;
  ents.reserve(child_start_[dir + 1] - child_start_[dir] + 2);
  for (uint32_t k = child_start_[dir]; k < child_start_[dir + 1]; k++)
    ents.emplace_back(nodes_[children_[k]].name, children_[k]);  // sorted by Check
  // "." and ".." where their bytes sort (no other name is either).
  for (const auto& dot : {std::make_pair(std::string_view("."), dir),
                          std::make_pair(std::string_view(".."), nodes_[dir].parent)})
    ents.insert(std::lower_bound(ents.begin(), ents.end(), dot), dot);
  return ents;
}

uint64_t ErofsImage::DirBytes(uint32_t dir) const {
  uint64_t blocks = 0;
  const uint32_t last = PackDirents(Entries(dir), BlockSize(), [&](size_t, size_t) { blocks++; });
  return ((blocks - 1) << block_bits_) + last;
}

void ErofsImage::Layout(const std::vector<uint32_t>& blob_order) {
  const uint32_t bsize = BlockSize();
  meta_blkaddr_ = Blocks(kHeaderEnd, block_bits_);
  nid_.assign(nodes_.size(), 0);
  blob_off_.assign(nodes_.size(), kNone);
  data_blk_.assign(nodes_.size(), 0);
  // From the metadata area's start. The root is not at nid 0: the kernel reports a nid as the
  // inode number, and readdir(3) hides entries whose inode number is 0 (the root's "." and "..").
  uint64_t pos = kSlotBytes;
  for (uint32_t i = 0; i < nodes_.size(); i++) {
    if (nodes_[i].link != kNone) continue;
    const bool chunked = IsRegular(nodes_[i]) && nodes_[i].size > 0;
    const uint64_t rec = chunked ? 96 : kInodeBytes;  // 64 + 8, in 32-byte slots
    if (pos % bsize + rec > bsize) pos = Blocks(pos, block_bits_) << block_bits_;
    nid_[i] = pos / kSlotBytes;
    pos += rec;
  }
  auto place = [&](uint32_t i) {
    if (i >= nodes_.size() || !IsRegular(nodes_[i]) || nodes_[i].size == 0 || blob_off_[i] != kNone)
      return;
    blob_off_[i] = blob_blocks_ << block_bits_;
    blob_blocks_ += BlobExtent(nodes_[i].size, block_bits_) >> block_bits_;
  };
  for (uint32_t i : blob_order) place(i);
  for (uint32_t i = 0; i < nodes_.size(); i++) place(i);
  uint64_t blk = meta_blkaddr_ + Blocks(pos, block_bits_);
  for (uint32_t i = 0; i < nodes_.size(); i++) {
    Node& x = nodes_[i];
    if (x.link != kNone || !(S_ISDIR(x.mode) || S_ISLNK(x.mode))) continue;
    if (S_ISDIR(x.mode)) x.size = DirBytes(i);  // once: the inode and the blocks use it
    data_blk_[i] = static_cast<uint32_t>(blk);
    blk += Blocks(S_ISDIR(x.mode) ? x.size : x.target.size(), block_bits_);
  }
  meta_blocks_ = blk;
}

size_t ErofsImage::Inode(uint32_t i, char* p) const {
  const Node& x = nodes_[i];
  const bool chunked = IsRegular(x) && x.size > 0;
  const size_t len = chunked ? kInodeBytes + kChunkIndexBytes : kInodeBytes;
  std::memset(p, 0, len);
  uint64_t size = x.size;
  uint32_t nlink = 1 + names_[i];
  if (S_ISDIR(x.mode)) {
    nlink = 2 + subdirs_[i];
  } else if (S_ISLNK(x.mode)) {
    size = x.target.size();
  }
  Put16(p, static_cast<uint16_t>(
               1 | ((chunked ? kLayoutChunkBased : kLayoutFlatPlain) << 1)));  // extended
  // Type and permissions; never set-user-ID or set-group-ID (the mount is nosuid besides).
  Put16(p + 4, static_cast<uint16_t>((x.mode & S_IFMT) | (x.mode & 01777)));
  Put64(p + 8, size);
  if (chunked) {
    unsigned extra = 0;  // one chunk holds the whole file
    while ((uint64_t{1} << (block_bits_ + extra)) < x.size) extra++;
    Put16(p + 16, static_cast<uint16_t>(kChunkIndexes | extra));
    Put16(p + kInodeBytes + 2, 1);  // device 1: the blob
    Put32(p + kInodeBytes + 4, static_cast<uint32_t>(blob_off_[i] >> block_bits_));
  } else {
    Put32(p + 16, data_blk_[i]);
  }
  Put32(p + 20, i + 1);
  Put32(p + 24, opts_.uid);
  Put32(p + 28, opts_.gid);
  int64_t sec = x.mtime_ns / 1000000000, nsec = x.mtime_ns % 1000000000;
  if (nsec < 0) {
    sec--;
    nsec += 1000000000;
  }
  Put64(p + 32, static_cast<uint64_t>(sec));
  Put32(p + 40, static_cast<uint32_t>(nsec));
  Put32(p + 44, nlink);
  return len;
}

std::string ErofsImage::DirBlocks(uint32_t dir) const {
  const auto ents = Entries(dir);
  const uint32_t bsize = BlockSize();
  std::string out;
  PackDirents(ents, bsize, [&](size_t first, size_t count) {
    std::string b(bsize, '\0');
    uint32_t nameoff = static_cast<uint32_t>(count * kDirentBytes);
    for (size_t k = 0; k < count; k++) {
      const auto& [name, node] = ents[first + k];
      char* d = b.data() + k * kDirentBytes;
      const Node& t = nodes_[Target(node)];
      Put64(d, Nid(node));
      Put16(d + 8, static_cast<uint16_t>(nameoff));
      d[10] = static_cast<char>(S_ISDIR(t.mode) ? kFtDir : S_ISLNK(t.mode) ? kFtSymlink : kFtReg);
      std::memcpy(b.data() + nameoff, name.data(), name.size());
      nameoff += static_cast<uint32_t>(name.size());
    }
    out += b;
  });
  out.resize(nodes_[dir].size);
  return out;
}

Status ErofsImage::WriteMeta(int fd) const {
  Out out(fd);
  char sb[128] = {};
  Put32(sb, kMagic);
  sb[12] = static_cast<char>(block_bits_);
  Put16(sb + 14, static_cast<uint16_t>(nid_[0]));
  Put64(sb + 16, nodes_.size() - std::count_if(nodes_.begin(), nodes_.end(),
                                               [](const Node& x) { return x.link != kNone; }));
  Put64(sb + 24, static_cast<uint64_t>(opts_.build_time_ns / 1000000000));
  Put32(sb + 32, static_cast<uint32_t>(opts_.build_time_ns % 1000000000));
  Put32(sb + 36, static_cast<uint32_t>(meta_blocks_));
  Put32(sb + 40, static_cast<uint32_t>(meta_blkaddr_));
  std::memcpy(sb + 64, "fanstore", 8);
  Put32(sb + 80, kIncompatChunkedFile | kIncompatDeviceTable);
  Put16(sb + 86, 1);  // one extra device: the blob
  Put16(sb + 88, static_cast<uint16_t>(kSlotOffset / 128));
  // The device slot: an empty tag, so that a mount without device= fails instead of opening
  // whatever path a tag named; the blob's blocks.
  char slot[128] = {};
  Put32(slot + 64, static_cast<uint32_t>(blob_blocks_));
  Status st = out.Put(kSuperOffset, std::string_view(sb, sizeof sb));
  if (st.ok()) st = out.Put(kSlotOffset, std::string_view(slot, sizeof slot));
  const uint64_t base = meta_blkaddr_ << block_bits_;
  char rec[kInodeBytes + kChunkIndexBytes];
  for (uint32_t i = 0; st.ok() && i < nodes_.size(); i++)
    if (nodes_[i].link == kNone)
      st = out.Put(base + nid_[i] * kSlotBytes, std::string_view(rec, Inode(i, rec)));
  for (uint32_t i = 0; st.ok() && i < nodes_.size(); i++) {
    const Node& x = nodes_[i];
    if (x.link != kNone) continue;
    const uint64_t at = uint64_t{data_blk_[i]} << block_bits_;
    if (S_ISDIR(x.mode))
      st = out.Put(at, DirBlocks(i));
    else if (S_ISLNK(x.mode))
      st = out.Put(at, x.target);
  }
  if (st.ok()) st = out.Put(meta_size(), "");
  return st.ok() ? out.Flush() : st;
}

}  // namespace fanstore::image
