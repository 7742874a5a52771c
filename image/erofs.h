// A read-only EROFS image of a dataset's tree, for the kernel-native read path (issue 31).
//
// The image is two files:
//   - the metadata image (superblock, a device table, inodes, directories, symlink targets),
//     written here from a tree that FanStore has checked, and nothing else: every byte the
//     kernel parses comes from this code;
//   - the blob: the regular files' bytes, one extent per file, which the kernel never parses
//     (the agent writes them as the job user; see BlobOffset).
// Regular files are chunk-based (one chunk per file, on device 1, the blob); directories and
// symlinks are flat, in the metadata image. The mount names the blob with `device=`.
//
// Layout of the metadata image, in blocks of BlockSize():
//   [0, 1024) zero | superblock (128 B) | one device slot (128 B) | pad to a block |
//   inodes (the root first, at nid 1) | directory and symlink blocks
// An inode record never crosses a block: a 64-byte extended inode (per-file owner, mode,
// mtime, link count), then for a regular file its one 8-byte chunk index.
//
// Plan() checks the tree (one root, every node reachable from it, names that the kernel
// accepts and unique in their directory, sizes that fit) and fixes the layout; it is
// deterministic, so the agent and the mounter compute the same blob extents from the same tree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fanstore::image {

inline constexpr uint32_t kNone = 0xffffffffu;

// What a regular file of `size` bytes takes in the blob: whole blocks of 2^block_bits. Plan lays
// the files out one after another in blob order, each at the next block boundary; a writer of
// the blob that follows the same order and this rule has every file where the plan has it.
inline uint64_t BlobExtent(uint64_t size, unsigned block_bits) {
  return ((size + (uint64_t{1} << block_bits) - 1) >> block_bits) << block_bits;
}
// The block size Plan chooses (Options::block_bits 0) for files that take `blocks9` blocks of
// 512 B: 512 B unless the blocks' numbers would pass 32 bits.
inline unsigned BlockBitsFor(uint64_t blocks9) { return blocks9 < kNone ? 9 : 12; }

// One name in the tree. Node 0 is the root directory (parent 0, empty name). 64 bytes, the
// 32-bit fields together: root holds one per name (14M at ImageNet-22k's size).
struct Node {
  uint32_t parent = 0;
  uint32_t mode = 0;      // st_mode with the type: a directory, a regular file or a symlink
  uint32_t link = kNone;  // another name (hard link) of regular file node `link`
  uint64_t size = 0;      // a regular file's bytes; a directory's is set by Plan (its entries')
  int64_t mtime_ns = 0;
  std::string_view name;    // one component; the caller keeps the bytes alive until Write
  std::string_view target;  // a symlink's target
};
static_assert(sizeof(Node) == 64);

struct Options {
  uint32_t uid = 0, gid = 0;  // every inode's owner
  // Block size as a shift: 9 (512 B) keeps the blob small for small files; 12 (4 KiB) is what
  // older erofs-utils can check. 0: 9 unless the blob would pass 2 TiB, then 12.
  unsigned block_bits = 0;
  int64_t build_time_ns = 0;  // the superblock's build time; 0: when Plan runs
};

class ErofsImage {
 public:
  // Checks `nodes` and lays the image out. The nodes' strings must outlive the image. The
  // files' extents follow each other in the blob in `blob_order` (node ids; by default node
  // order): the order in which the writer will have their bytes, so that its writes are
  // sequential. Files it leaves out follow in node order.
  static Result<ErofsImage> Plan(std::vector<Node> nodes, const Options& opts,
                                 const std::vector<uint32_t>& blob_order = {});

  // Where regular file `node`'s bytes go in the blob: a byte offset, a multiple of
  // BlockSize(); kNone for anything else (a directory, a symlink, a hard link's second name).
  uint64_t BlobOffset(uint32_t node) const { return blob_off_[node]; }
  // The blob's length: every file's bytes, each padded to a block.
  uint64_t blob_size() const { return blob_blocks_ << block_bits_; }
  uint64_t meta_size() const { return meta_blocks_ << block_bits_; }
  uint32_t BlockSize() const { return 1u << block_bits_; }
  // The node's nid (its inode's slot), or the nid of the file a hard link names.
  uint64_t Nid(uint32_t node) const { return nid_[Target(node)]; }

  // The tree as planned (a directory's size is its entries').
  const std::vector<Node>& nodes() const { return nodes_; }

  // Writes the metadata image into fd (an empty regular file) from offset 0.
  Status WriteMeta(int fd) const;

 private:
  ErofsImage() = default;
  Status Check();
  Status ChooseBlockSize(uint64_t blocks9);  // blocks9: the files' blocks of 512 B
  void Layout(const std::vector<uint32_t>& blob_order);
  uint32_t Target(uint32_t n) const { return nodes_[n].link == kNone ? n : nodes_[n].link; }
  // A directory's entries, "." and ".." among them, sorted by name: (name, node).
  std::vector<std::pair<std::string_view, uint32_t>> Entries(uint32_t dir) const;
  // Its size: whole blocks, then the last one's use (computed once, into the node's size).
  uint64_t DirBytes(uint32_t dir) const;
  // The record: inode and chunk index, into `rec` (72 bytes); its length.
  size_t Inode(uint32_t n, char* rec) const;
  std::string DirBlocks(uint32_t dir) const;

  std::vector<Node> nodes_;
  Options opts_;
  unsigned block_bits_ = 9;
  std::vector<uint32_t> child_start_, children_;  // CSR: children of n, sorted by name
  std::vector<uint32_t> names_;                   // names (hard links included) of each file
  std::vector<uint32_t> subdirs_;
  std::vector<uint64_t> nid_, blob_off_;
  std::vector<uint32_t> data_blk_;  // directories and symlinks: their first block
  uint64_t meta_blkaddr_ = 0, meta_blocks_ = 0, blob_blocks_ = 0;
  std::vector<uint32_t> order_;  // inodes in their order in the image: the root first
};

}  // namespace fanstore::image
