// The kernel-native read path's split of trust (issue 31): the job user's agent writes the blob
// (the files' bytes) and a tree file (what the image holds: names, modes, sizes, mtimes, the
// blob's order); root reads the tree file as hostile input, plans the image itself
// (ErofsImage::Plan checks the tree), writes the metadata into an unnamed file of its own, checks
// the blob, and mounts the two. The kernel parses no byte that root did not write; the blob's
// bytes it only copies.
//
// Tree file, little-endian, its size exactly the sum of its parts:
//   header (32 B): "FSTREE01", u32 nodes, u32 order entries, u64 string bytes, u64 blob bytes
//   nodes × 32 B: u32 parent, u32 mode, u64 size, i64 mtime_ns, u32 link, u16 name, u16 target
//   order entries × u32 (node ids: the blob's order, image/erofs.h)
//   strings: each node's name, then its symlink target
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/erofs.h"

namespace fanstore::image {

// What root takes at most from the job user's agent: a tree file of 2 GiB and 32M names (14.2M
// names take about 0.8 GB). Root copies the file to one of its own and reads it twice (the plan,
// then the metadata's writing), holding about 12 bytes a name and 16 a directory, up to 32 while
// their array grows (image/erofs.h): 0.2 GB at 14.2M, 0.4 GB at the cap, 1.4 GB at the cap for a
// tree of nothing but directories.
inline constexpr uint64_t kMaxTreeBytes = uint64_t{2} << 30;
inline constexpr uint64_t kMaxTreeNodes = uint64_t{32} << 20;

// The agent's side: the tree, in canonical order (image/erofs.h: root refuses any other), and
// the blob's order (ErofsImage::PlanSorted's), into fd (an empty regular file) from offset 0.
// blob_size: what the files take in the blob as the plan lays it out (BlobExtent of each, in
// blob order). Root refuses a tree whose files take another size; that each file's bytes are at
// its extent rests on the blob's writer following the same rule.
Status WriteTree(int fd, const std::vector<Node>& nodes, const std::vector<uint32_t>& blob_order,
                 uint64_t blob_size);
// The same from a source that emits every node in order, called twice (the records, then the
// names), so that no vector of nodes is built: it stops at the first error emit returns.
using EmitNodes = std::function<Status(const std::function<Status(const Node&)>& emit)>;
Status WriteTree(int fd, const EmitNodes& nodes, const std::vector<uint32_t>& blob_order,
                 uint64_t blob_size);

// A tree file as root reads it: the header checked when it is opened, the records and names as a
// plan reads them, front to back, a MiB at a time, each pass on its own. Its bytes must not change
// meanwhile: root reads its own copy of the job user's file (MountTree).
class TreeFile final : public NodeSource {
 public:
  // Reads `len` bytes at `off` of the tree into `dst`, or fails.
  using ReadFn = std::function<Status(uint64_t off, size_t len, char* dst)>;
  static Result<std::shared_ptr<TreeFile>> Open(uint64_t size, ReadFn read);

  uint64_t size() const override { return nodes_; }
  std::unique_ptr<NodeCursor> Nodes() const override;
  Status BlobOrder(const std::function<void(uint32_t)>& fn) const override;
  uint64_t blob_size() const { return blob_size_; }
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  class Cursor;
  ReadFn read_;
  uint64_t nodes_ = 0, order_ = 0, strings_ = 0, blob_size_ = 0, file_bytes_ = 0;
};
// The tree file open as fd, of at most max_bytes; fd stays open while the tree is read.
Result<std::shared_ptr<TreeFile>> ReadTree(int fd, uint64_t max_bytes = kMaxTreeBytes);
// The same from bytes in memory (the fuzz target's entry).
Result<std::shared_ptr<TreeFile>> ParseTree(std::vector<char> bytes);

inline constexpr uid_t kNoOwner = static_cast<uid_t>(-1);

struct MountRequest {
  // Each a descriptor the caller opened without following links (O_NOFOLLOW, or O_PATH of a
  // directory it resolved safely).
  int tree_fd = -1;        // the tree file and the blob: regular files of `owner`, on a local disk
  int blob_fd = -1;        // file system (ext2/3/4, XFS, Btrfs, F2FS, ZFS)
  int meta_dir_fd = -1;    // a directory of root's that nobody else may write, on such a disk:
                           // the metadata's unnamed file goes there
  int target_fd = -1;      // the mount point
  uid_t owner = kNoOwner;  // the job user: the files' owner and every inode's (none: refused)
  gid_t group = 0;
};
// Copies the tree to an unnamed file of root's in the metadata's directory, plans the image from
// that copy (checking it), writes the metadata, checks the blob against it, and mounts the image
// read-only, nosuid, nodev on the target. Refused besides: metadata of more
// than 64 MiB + 24 bytes for each byte of the tree, or more than the space others could use in
// the metadata's directory (root's reserve is not the job's).
Status MountTree(const MountRequest& req);

}  // namespace fanstore::image
