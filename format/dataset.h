// A packed dataset opened for reading: manifest, dictionary and every shard's index.
// Used by verify, ls, cat, extract and the agent's stage-in.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "format/manifest.h"
#include "format/shard.h"

namespace fanstore::format {

class Dataset {
 public:
  // Reads the manifest, the dictionary and the indexes of all shards (not their data).
  // Rejects missing shards, foreign shards, and a path that appears twice.
  static Result<std::unique_ptr<Dataset>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const Dictionary& dict() const { return dict_; }
  size_t shard_count() const { return shards_.size(); }
  const ShardFile& shard(size_t i) const { return *shards_[i]; }

  struct Ref {
    uint32_t shard;
    uint32_t entry;
  };
  // nullptr when `path` is not in the namespace. "" is the root and has no entry.
  const IndexEntry* Find(const std::string& path, Ref* ref = nullptr) const;
  // Every entry, sorted by path.
  std::vector<const IndexEntry*> SortedEntries() const;

 private:
  // Opens every shard (in parallel) and indexes its entries by path.
  Status OpenShards();
  // Every parent of every entry is a directory entry.
  Status CheckParents() const;
  // Symlinks stay inside when resolved through each other.
  Status CheckLinks() const;

  std::string dir_;
  Manifest manifest_;
  Dictionary dict_;
  std::vector<std::unique_ptr<ShardFile>> shards_;
  struct PathHash {
    using is_transparent = void;  // lookups by string_view allocate nothing
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Ref, PathHash, std::equal_to<>> by_path_;
};

// Progress of a pass over every shard: bytes read of all the shards' bytes, and files done of
// all the files. Called from one thread at a time, last with everything done.
using ProgressFn = std::function<void(uint64_t bytes_read, uint64_t bytes_total, uint64_t files,
                                      uint64_t files_total)>;

// Reads every shard once with `threads` threads (0: the default), checking every hash as Verify
// does, and hands each file or symlink to `fn` with its stored frame (on pool threads), or a
// file too large to hold to `stream` (on the scanning thread). What they return stops the scan.
Status ScanAll(const Dataset& ds, size_t threads, const ProgressFn& progress, const FrameFn& fn,
               const StreamFn& stream);

// Creates `dest` (0700), or takes it when it exists and is an empty directory; opens it.
Result<UniqueFD> OpenEmptyDest(const std::string& dest);

struct VerifyOptions {
  size_t threads = 0;
  ProgressFn progress;
};
// Reads every shard completely and checks every hash and structure. The error names the first
// bad shard, file and offset.
Status Verify(const Dataset& ds, const VerifyOptions& opts);

struct ExtractOptions {
  size_t threads = 0;
  ProgressFn progress;
};
// Restores the tree under `dest` (created; must not exist or be empty): content, mode, mtime,
// empty directories and symlinks. Never writes outside dest: paths are checked, every parent is
// opened with O_NOFOLLOW, and symlinks are created last.
Status Extract(const Dataset& ds, const std::string& dest, const ExtractOptions& opts);

}  // namespace fanstore::format
