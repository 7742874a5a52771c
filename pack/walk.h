// The source tree as `fanstore pack` sees it: one walk that lists what will be stored (and
// warns about what will not), then reads that check each file is still the one the walk saw.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "format/format.h"
#include "pack/pack.h"

namespace fanstore::pack {

struct SrcEntry {
  std::string rel;
  format::EntryType type;
  uint32_t mode;
  uint64_t size;
  int64_t mtime_ns;
  std::string target;  // symlinks; hard links: the path of the file's first name
  int64_t ctime_ns = 0;
  std::string xattrs = {};  // files and directories: the carried ones, encoded (common/xattrs.h)
};

struct SourceTree {
  std::vector<SrcEntry> entries;
  uint64_t skipped = 0;  // entries not stored (sockets, devices, escaping symlinks), warned about
  uint32_t root_mode = 0755;
  int64_t root_mtime_ns = 0;
  int64_t root_ctime_ns = 0;
  uint64_t root_size = 0;
  std::string root_xattrs;
};

// Lists the tree under `root`; opts.warn hears about what is skipped.
Status WalkSource(const std::string& root, const Options& opts, SourceTree* out);

// Each symlink is checked on its own (lexically) when it is listed; resolved through the others,
// a chain such as `x/esc -> up/../..` with `x/up -> .` still leaves the tree. Removes such links
// from `entries` (warning about each, named under `root`) and returns how many.
uint64_t DropEscapingLinks(const std::string& root, std::vector<SrcEntry>* entries,
                           const std::function<void(const std::string&)>& warn);

// a/b, where either may be empty.
std::string Join(const std::string& a, const std::string& b);

// Opens a source file found by the walk, checking that it is still the regular file of the
// size seen.
Result<UniqueFD> OpenSource(const std::string& path, const SrcEntry& e);
// The whole of a (small) source file; with `xattrs`, its carried extended attributes too,
// encoded (read through the open descriptor, on the thread that reads the file).
Status ReadWhole(const std::string& path, const SrcEntry& e, std::string* out,
                 std::string* xattrs = nullptr);
// The carried extended attributes of the source file open as `fd` (named `path` in errors).
Status ReadXattrs(int fd, const std::string& path, std::string* enc);

}  // namespace fanstore::pack
