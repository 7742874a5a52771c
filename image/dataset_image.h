// A packed dataset as an EROFS image (image/erofs.h): the tree from the dataset's checked
// index, the files' bytes decoded and verified as `fanstore extract` does them, with no file
// created per dataset file. `fanstore extract --erofs` writes one; the kernel-native read path
// mounts one.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "format/dataset.h"
#include "image/erofs.h"

namespace fanstore::image {

inline constexpr char kMetaName[] = "image.erofs";
inline constexpr char kBlobName[] = "data.blob";
inline constexpr char kTreeName[] = "tree";  // the image as the agent describes it (image/mount.h)

// The blob's writes, gathered per thread: a file's bytes that follow the thread's last ones in
// the blob join them (each file is padded to its block), and go out in one pwrite per MiB. A
// scan hands each thread whole shards in order, and the blob follows that order
// (ErofsImage::Plan's blob_order), so nearly every write is a MiB. Add from any thread;
// FlushAll once every Add has returned.
class BlobWriter {
 public:
  BlobWriter(int fd, uint32_t block, std::string name = kBlobName)
      : fd_(fd), block_(block), name_(std::move(name)) {}
  ~BlobWriter();
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;
  // Where its `files` are large (a mean of 64 KiB or more), reserves the blob's first `size`
  // bytes on the disk (fallocate: no room is a clear error now, never a SIGBUS from a write
  // through the mapping) and maps them, so that writes there are copies from every thread at
  // once. Otherwise (or where the file system cannot reserve), writes take turns: the kernel
  // holds a file's lock through each buffered write, and a second writer would spin on a core.
  // Large files' staging is bound by those copies (100,000 files of 110 KiB: ready 11.8-15.4 s
  // mapped, 14.7-15.6 s with pwrite); small files' by their number, and faulting the mapping's
  // pages in costs more than the lock (1.33M files of 1.6 KiB: 2.9-5.8 s mapped, 1.7-2.1 s).
  static constexpr uint64_t kMapMeanFileSize = 64 << 10;
  Status Map(uint64_t size, uint64_t files);
  Status Add(uint64_t off, std::string_view file_bytes);  // a whole file, at its extent
  Status Write(uint64_t off, std::string_view bytes);     // now, as they are
  Status FlushAll();
  // What a shard scan hands the blob (format::ScanShard's callbacks): each regular file's
  // decoded bytes at the offset at(file) gives, a small file whole (Add), a large one as it is
  // decoded (Write). `at` is called once a file, from the scan's threads.
  struct Fill {
    format::FrameFn small;
    format::StreamFn large;
  };
  Fill Filler(format::DecoderPool* decoders, std::function<uint64_t(const format::IndexEntry&)> at);

 private:
  struct Run {
    uint64_t start = 0;
    std::string bytes;
  };
  Status Flush(Run* r);
  int fd_;
  uint32_t block_;
  std::string name_;  // for errors
  char* map_ = nullptr;
  uint64_t map_size_ = 0;
  std::mutex mu_;
  std::mutex write_mu_;                            // the writes past the mapping, one at a time
  std::unordered_map<std::thread::id, Run> runs_;  // a node never moves: pointers stay valid
};

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
