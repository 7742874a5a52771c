// The namespace an archive stream builds up as its members arrive (archive.cc): the paths named so
// far and as what, the directories they imply, and the checks that each path is named once and
// lies below directories only. Internal to pack/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "format/format.h"
#include "pack/walk.h"

namespace fanstore::pack {

// The member name `name` as a path under `prefix`: leading `/`, empty and `.` components dropped.
// False when it holds `..`.
bool MemberPath(const std::string& prefix, const char* name, std::string* out);

// 128 bits of path hash: the set of file paths without keeping the paths (a collision between
// two of 14 million paths has a chance of about 1e-25).
struct PathKey {
  uint64_t lo, hi;
  bool operator==(const PathKey& o) const { return lo == o.lo && hi == o.hi; }
};

// A set of paths as PathKeys in one array: open addressing with linear probing, at most 70 %
// full, 16 bytes a slot. One cache miss per lookup and no allocation per path, where a
// node-based set took two misses and a node each: its upkeep was a fifth of an archive pack's
// reading thread at 1.28M files. The hash is seeded at random for each pack: the keys are never
// stored, and an archive cannot pick names that pile up in a few slots (the probes would then
// grow with the square of the member count).
class PathKeySet {
 public:
  PathKeySet();  // draws the seed
  PathKey Key(std::string_view path) const;
  bool Contains(PathKey k) const;
  void Insert(PathKey k);

 private:
  static bool IsFree(PathKey k) { return k.lo == 0 && k.hi == 0; }
  // False when k is there already.
  static bool Place(std::vector<PathKey>* slots, size_t mask, PathKey k);
  void Grow();

  const uint64_t seed_;
  std::vector<PathKey> slots_;
  size_t mask_ = 0, count_ = 0;
};

// Files are kept as PathKeys (an archive may hold millions); directories, symlinks and hard
// links as entries, which the packer stores after the files.
class ArchiveTree {
 public:
  // Whether `path` is a file added earlier.
  bool HasFile(const std::string& path) const { return files_.Contains(files_.Key(path)); }
  // Whether `path` is a directory, symlink or hard link added earlier.
  bool HasNonFile(const std::string& path) const { return nonfile_at_.count(path) != 0; }

  // Checks that `rel` is new and that its parents are directories (making missing ones, with
  // `mtime_ns`); a file's path joins the files.
  Status Claim(const std::string& rel, format::EntryType type, int64_t mtime_ns);
  // A directory. One made earlier for a child, before the archive listed it, takes `mode` and
  // `mtime_ns`: the archive's attributes win.
  Status AddDir(const std::string& rel, uint32_t mode, int64_t mtime_ns);
  // The ctime and extended attributes (encoded) of directory `rel`, added.
  void SetDirAttrs(const std::string& rel, int64_t ctime_ns, std::string xattrs);
  // A symlink, or a hard link (to the file `target`), claimed as `rel`.
  Status AddLink(const std::string& rel, format::EntryType type, uint32_t mode, int64_t mtime_ns,
                 std::string target);

  // Directories, symlinks and hard links, in the order they were added.
  std::vector<SrcEntry>& nonfiles() { return nonfiles_; }

 private:
  void AddNonFile(SrcEntry e);

  std::vector<SrcEntry> nonfiles_;
  std::unordered_map<std::string, size_t> nonfile_at_;  // path -> index in nonfiles_
  PathKeySet files_;
  std::string last_dir_;  // the last file's directory, known to exist
};

}  // namespace fanstore::pack
