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
// PlanSorted() reads the tree front to back, once to check it (one root, every node after its
// parent, names that the kernel accepts, sorted and unique in their directory, sizes that fit)
// and lay it out, once more to write it (WriteMeta), holding 12 bytes a node and 16 a
// directory (up to 32 while their array grows), never the names: root plans ImageNet-22k's 14.2M
// names from its own copy of the agent's tree file (image/mount.h) in about 200 MB. It is
// deterministic, so the agent and the mounter compute the same blob extents from the same tree.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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
// 32-bit fields together: a tree in memory holds one per name; root reads a tree file's one at
// a time (NodeSource).
struct Node {
  uint32_t parent = 0;
  uint32_t mode = 0;      // st_mode with the type: a directory, a regular file or a symlink
  uint32_t link = kNone;  // another name (hard link) of regular file node `link`
  uint64_t size = 0;      // a regular file's bytes (a directory's is its entries', planned)
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

// A tree read front to back, in canonical order: node 0 the root directory, then every other
// node after its parent, the parents never decreasing (breadth first: each directory's
// children together), and each directory's children by name, in byte order, each name once.
class NodeCursor {
 public:
  virtual ~NodeCursor() = default;
  // The next node (its name and target valid until the next call); null after the last.
  virtual Result<const Node*> Next() = 0;
};
class NodeSource {
 public:
  virtual ~NodeSource() = default;
  virtual uint64_t size() const = 0;  // nodes
  virtual std::unique_ptr<NodeCursor> Nodes() const = 0;
  // The blob's order (ErofsImage::PlanSorted), front to back.
  virtual Status BlobOrder(const std::function<void(uint32_t node)>& fn) const = 0;
};

// An in-memory tree in any order put in canonical order: parents checked (in range,
// directories, every node reachable from the root), each directory's children sorted by name.
// Renumbers the nodes, their parents and links, and the blob's order; returns each old node's
// new id. Names are checked by the plan.
Result<std::vector<uint32_t>> Canonical(std::vector<Node>* nodes,
                                        std::vector<uint32_t>* blob_order);

class ErofsImage {
 public:
  // Checks a tree in canonical order and lays the image out, in one pass over `src`, which must
  // outlive the image (WriteMeta reads it again). The files' extents follow each other in the
  // blob in the source's blob order (node ids): the order in which the writer will have their
  // bytes, so that its writes are sequential. Files it leaves out follow in node order.
  static Result<ErofsImage> PlanSorted(std::shared_ptr<const NodeSource> src, const Options& opts);
  // The same for a tree in memory, in any order (Canonical); node ids stay the caller's.
  static Result<ErofsImage> Plan(std::vector<Node> nodes, const Options& opts,
                                 const std::vector<uint32_t>& blob_order = {});

  // Where regular file `node`'s bytes go in the blob: a byte offset, a multiple of
  // BlockSize(); kNone for anything else (a directory, a symlink, a hard link's second name,
  // an empty file).
  uint64_t BlobOffset(uint32_t node) const;
  // The blob's length: every file's bytes, each padded to a block.
  uint64_t blob_size() const { return blob_blocks_ << block_bits_; }
  uint64_t meta_size() const { return meta_blocks_ << block_bits_; }
  uint32_t BlockSize() const { return 1u << block_bits_; }
  // The node's nid (its inode's slot), or the nid of the file a hard link names.
  uint64_t Nid(uint32_t node) const { return node < nodes_ ? nid_[Id(node)] : kNone; }

  // Writes the metadata image into fd (an empty regular file) from offset 0, reading the source
  // once more.
  Status WriteMeta(int fd) const;

 private:
  struct Dir {
    // Its entries' bytes in blocks of 4 KiB, then (Check) in the block size chosen; those in
    // blocks of 512 B wait in where_ until then.
    uint64_t size = 0;
    uint32_t parent = 0, subdirs = 0;
  };
  class Pass;
  class Writer;

  ErofsImage() = default;
  Status Check();
  Status PlaceBlob();
  uint32_t Id(uint32_t node) const { return id_.empty() ? node : id_[node]; }

  std::shared_ptr<const NodeSource> src_;
  std::vector<uint32_t> id_;  // Plan's: the caller's node ids in canonical order
  Options opts_;
  unsigned block_bits_ = 9;
  uint64_t nodes_ = 0, inodes_ = 0;
  std::vector<uint32_t> nid_;
  // Regular files: the size, then (PlaceBlob) the blob offset; directories and symlinks: their
  // first block in the metadata.
  std::vector<uint64_t> where_;
  // Directories; regular files; those with bytes (a chunk in the blob); placed in the blob.
  std::vector<bool> dir_, reg_, file_, placed_;
  std::vector<Dir> dirs_;                             // in node order
  std::vector<std::pair<uint32_t, uint32_t>> links_;  // Check's: (hard link, its file)
  std::vector<uint32_t> link_targets_;  // sorted: how often a file is there is its other names
  uint64_t meta_blkaddr_ = 0, meta_blocks_ = 0, blob_blocks_ = 0, dirs_blk_ = 0, links_blk_ = 0;
};

}  // namespace fanstore::image
