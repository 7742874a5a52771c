// A packed dataset as an EROFS image (image/erofs.h): the tree from the dataset's checked
// index, the files' bytes decoded and verified as `fanstore extract` does them, with no file
// created per dataset file. `fanstore extract --erofs` writes one; the kernel-native read path
// mounts one.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "common/status.h"
#include "format/dataset.h"
#include "image/erofs.h"

namespace fanstore::image {

inline constexpr char kMetaName[] = "image.erofs";
inline constexpr char kBlobName[] = "data.blob";

// The dataset's tree as image nodes: node 0 its root, then every entry in path order.
struct DatasetTree {
  std::vector<Node> nodes;
  std::vector<const format::IndexEntry*> entries;  // node i + 1's entry
  std::deque<std::string> targets;                 // symlink targets the nodes point into
};
// Symlink and hard-link targets are read from the shards (one frame each).
Result<DatasetTree> TreeOf(const format::Dataset& ds);

struct WriteOptions {
  Options image;
  size_t threads = 0;  // decompression (0: the default)
  format::ProgressFn progress;
};
// Writes DEST/image.erofs and DEST/data.blob (DEST created, or empty), both 0600.
Status WriteDatasetImage(const format::Dataset& ds, const std::string& dest,
                         const WriteOptions& opts);

}  // namespace fanstore::image
