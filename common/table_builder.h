// The agent's side of the metadata table (common/table.h): builds the image from the dataset's
// namespace, writes it, and holds it while serving. Clients link only the view (table.h).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/table.h"

namespace fanstore::table {

// What the builder takes for one namespace entry. Missing parent directories are added.
// Paths and texts are views: the caller keeps their bytes until Build returns.
struct Node {
  std::string_view path;  // relative, canonical ("a/b/c"), "" is the root
  uint32_t mode = 0;      // full st_mode with type bits
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t flags = 0;
  // A symlink: its target. A hard link (`hardlink`): the path of the regular file it is
  // another name of (kHardLink). A file or directory: its extended attributes, encoded
  // (common/xattrs.h).
  std::string_view text;
  uint32_t source_shard = kNone;  // files: where the dataset holds them
  uint32_t source_index = kNone;
  uint32_t copy_offset = 0;  // files with kRawCopy: the frame's offset in the shard copy
  bool hardlink = false;
  int64_t ctime_ns = 0;  // 0: mtime_ns

  std::string_view Xattrs() const { return hardlink || S_ISLNK(mode) ? std::string_view() : text; }
};

struct BuildOptions {
  std::string local_root;  // where kLocal files live
  // Where the agent caches other files, as <cache_root>/<CacheName(entry hash)>; "" for none.
  // Clients open a cached file directly and ask the agent only on a miss.
  std::string cache_root;
  uint64_t dev = 0;
  uint64_t dataset_id = 0;
  uint32_t uid = 0, gid = 0;
  std::string dataset;  // the dataset directory
  std::string tool;     // reads one file of it (see Header::tool_off)
  // Threads that walk a source's parts at once (NodeSource::Parts); the image is the same
  // whatever the count.
  size_t threads = 1;
};

// A table image written straight into its file, mapped read-write, so that the agent keeps no
// second copy of it in its heap (issue 13: 115 bytes per file).
class FileImage {
 public:
  FileImage() = default;
  ~FileImage();
  FileImage(const FileImage&) = delete;
  FileImage& operator=(const FileImage&) = delete;
  // Creates (or truncates) `path`, mode 0600, of `size` zero bytes, mapped shared.
  Result<char*> Create(const std::string& path, size_t size);
  std::string_view view() const { return {static_cast<const char*>(map_), len_}; }
  char* data() const { return static_cast<char*>(map_); }

 private:
  void* map_ = nullptr;
  size_t len_ = 0;
};

// The nodes a table is built from, in two passes over the caller's data (issue 13: the table
// is the only copy of the metadata; nobody holds every node at once). ForEach gives the same
// nodes in the same order in both passes (0: counting, 1: writing); a node's views need live
// only during its call. The root is not among them: node k becomes entry k + 1, entry 0 is
// Root(), and the missing parent directories follow the given nodes.
class NodeSource {
 public:
  using NodeFn = std::function<Status(const Node&)>;
  virtual ~NodeSource() = default;
  virtual Node Root() const;  // default: mode 0555, time 0
  virtual Status ForEach(int pass, const NodeFn& fn) const = 0;
  // A source may come in parts that can be walked at once, each on its own thread (the agent's:
  // one per shard): ForEachIn gives part `part`'s nodes, and the parts in order are ForEach's.
  virtual size_t Parts() const { return 1; }
  virtual Status ForEachIn(size_t /*part*/, int pass, const NodeFn& fn) const {
    return ForEach(pass, fn);
  }
};

// Serialises the nodes into a table image in the memory `alloc` gives for its size (zeroed).
// Fails on duplicate or non-canonical paths, or a parent that is not a directory.
using AllocFn = std::function<Result<char*>(size_t)>;
Status BuildInto(const NodeSource& nodes, const BuildOptions& opts, const AllocFn& alloc);
// From a vector, which may hold the root ("").
Status BuildInto(const std::vector<Node>& nodes, const BuildOptions& opts, const AllocFn& alloc);
// The same into a string.
Result<std::string> Build(const std::vector<Node>& nodes, const BuildOptions& opts);

// Writes `image` to `path` (mode 0600) atomically: a temporary file, then rename.
Status WriteFile(const std::string& path, std::string_view image);

// Held by the agent while it serves: maps the table file read-write and locks the robust
// mutex in its header. Keep the object alive (on the thread that called Acquire) until
// shutdown; destroying it unlocks, which clients see as "agent gone".
class AgentLock {
 public:
  AgentLock() = default;
  ~AgentLock();
  AgentLock(const AgentLock&) = delete;
  AgentLock& operator=(const AgentLock&) = delete;
  Status Acquire(const std::string& table_path);
  // The same on a read-write mapping of the table that the caller keeps (FileImage): no second
  // mapping of its pages.
  Status Acquire(char* map, size_t len);
  // Sets kLocal on entry `index` once its file is complete under the local root (lazy
  // unpack); clients that load the flag afterwards open the file directly.
  void MarkLocal(uint32_t index);

 private:
  Status Lock();

  void* map_ = nullptr;
  size_t len_ = 0;
  bool owned_ = false;  // mapped by Acquire(path), unmapped here
};
}  // namespace fanstore::table
