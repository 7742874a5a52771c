// Small I/O helpers over POSIX calls, returning Status with the path named.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/remove_tree.h"  // RemoveTree, for the callers of this header
#include "common/status.h"
#include "common/text.h"  // HumanBytes, for the callers of this header
#include "common/unique_fd.h"

namespace fanstore {

// The whole of a regular file of at most max_bytes, read to its end (so /proc files, whose
// size reads 0, work). NotFound when it does not exist; Corruption when it is larger.
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);
// Full pread of `len` bytes at `off`; a short file is Corruption naming `what`.
Status PreadFull(int fd, void* buf, size_t len, uint64_t off, const std::string& what);
Status WriteFull(int fd, const void* buf, size_t len, const std::string& what);
// Full pwrite of `bytes` at `off`.
Status PwriteFull(int fd, std::string_view bytes, uint64_t off, const std::string& what);
// Writes a new file from its start, piece by piece, leaving a hole instead of every aligned
// 4 KiB block of zeros, wherever the pieces end, as a sparse file had them (the dataset stores
// the zeros; SEEK_HOLE and the space used then match the packed tree's). One pwrite per run of
// data (a file given in one piece without holes: one pwrite), and one per block that straddles
// two pieces. Finish writes a last short block of zeros and sets the size when the file ends in
// a hole.
class SparseWriter {
 public:
  static constexpr size_t kBlock = 4096;
  SparseWriter(int fd, std::string what) : fd_(fd), what_(std::move(what)) {}
  Status Write(std::string_view piece);
  Status Finish();

 private:
  Status Put(const char* p, size_t n);     // at off_
  Status Blocks(const char* p, size_t n);  // whole blocks (but the last) from off_, aligned
  int fd_;
  std::string what_;
  char partial_[kBlock];  // the start of a block, until the next piece completes it
  size_t partial_len_ = 0;
  size_t data_tail_ = 0;  // bytes left of a block written as data by the last piece
  uint64_t off_ = 0;      // bytes of the file given so far
  uint64_t written_ = 0;  // end of the last byte written
};
// Writes `data` to `path` through a temporary file and rename, with fsync.
Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode);
// Opens the parent directory of the canonical relative path `rel` under root_fd, one component
// at a time with O_NOFOLLOW, so a symlink can never redirect a write. *leaf gets the last
// component.
Result<UniqueFD> OpenParentDir(int root_fd, const std::string& rel, std::string* leaf);
// Creates every missing directory of the canonical relative path `rel` under root_fd (mode),
// without following symlinks.
Status MakeDirs(int root_fd, const std::string& rel, mode_t mode);

// The open-file limits, before and after RaiseOpenFileLimit.
struct OpenFileLimit {
  rlim_t was, soft, hard;
};
// Raises the soft limit of open files to `want`, or as far as the hard limit allows (never
// lowers it): for programs that keep many shards open where the usual soft limit is 1,024.
OpenFileLimit RaiseOpenFileLimit(rlim_t want);

}  // namespace fanstore
