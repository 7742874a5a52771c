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
#include <string>
#include <vector>

#include "common/status.h"
#include "image/erofs.h"

namespace fanstore::image {

// What root takes at most from the job user's agent: a tree file of 2 GiB and 32M names (14.2M
// names take about 0.8 GB). Root's memory while it plans is about 120 B a name besides the file:
// 3.8 GB at the cap, 1.7 GB at 14.2M.
inline constexpr uint64_t kMaxTreeBytes = uint64_t{2} << 30;
inline constexpr uint64_t kMaxTreeNodes = uint64_t{32} << 20;

// The agent's side: the tree and the blob's order (ErofsImage::Plan's arguments), into fd (an
// empty regular file) from offset 0. blob_size: what the files take in the blob as Plan lays it
// out (BlobExtent of each, in blob order). Root refuses a tree whose files take another size;
// that each file's bytes are at its extent rests on the blob's writer following the same rule.
Status WriteTree(int fd, const std::vector<Node>& nodes, const std::vector<uint32_t>& blob_order,
                 uint64_t blob_size);
// The same from a source that emits every node in order, called twice (the records, then the
// names), so that no vector of nodes is built: it stops at the first error emit returns.
using NodeSource = std::function<Status(const std::function<Status(const Node&)>& emit)>;
Status WriteTree(int fd, const NodeSource& nodes, const std::vector<uint32_t>& blob_order,
                 uint64_t blob_size);

// A tree file read back, each byte once: the nodes' names and targets point into `bytes`, a
// private copy of the names (the writer may change the file meanwhile: what was checked is what
// is used).
struct Tree {
  std::vector<char> bytes;
  std::vector<Node> nodes;
  std::vector<uint32_t> blob_order;
  uint64_t blob_size = 0;
  uint64_t file_bytes = 0;  // the tree file's size
};
Result<Tree> ReadTree(int fd, uint64_t max_bytes = kMaxTreeBytes);
// The same from bytes already read (the fuzz target's entry).
Result<Tree> ParseTree(const std::vector<char>& bytes);

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
// Reads and checks the tree, plans and writes the metadata, checks the blob against it, and
// mounts the image read-only, nosuid, nodev on the target. Refused besides: metadata of more
// than 64 MiB + 24 bytes for each byte of the tree, or more than the space others could use in
// the metadata's directory (root's reserve is not the job's).
Status MountTree(const MountRequest& req);

}  // namespace fanstore::image
