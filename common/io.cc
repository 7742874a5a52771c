// POSIX I/O helpers.
#include "common/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/unique_fd.h"

namespace fanstore {

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: a FIFO planted under the name must not hang the open; it is refused below.
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);  // ENOENT: NotFound
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  auto too_large = [&](uint64_t size) {
    return Status::Corruption(path + " is too large: " + std::to_string(size) +
                              " bytes or more, at most " + std::to_string(max_bytes) + " accepted");
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(st.st_size);
  // Read to the end rather than st_size bytes: /proc files report 0, and a file may grow.
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + path, errno);
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max_bytes) return too_large(out.size() + n);
    out.append(buf, static_cast<size_t>(n));
  }
}

Status PwriteFull(int fd, std::string_view bytes, uint64_t off, const std::string& what) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::FromErrno("write " + what + " at offset " + std::to_string(off),
                               n < 0 ? errno : EIO);
    bytes.remove_prefix(static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

Status PreadFull(int fd, void* buf, size_t len, uint64_t off, const std::string& what) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t r = ::pread(fd, p + done, len - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("read " + what + " at offset " + std::to_string(off + done), errno);
    }
    if (r == 0)
      return Status::Corruption(what + ": unexpected end of file at offset " +
                                std::to_string(off + done));
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

Status WriteFull(int fd, const void* buf, size_t len, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t w = ::write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + what, errno);
    }
    p += w;
    len -= static_cast<size_t>(w);
  }
  return Status::OK();
}

namespace {
const char kZeros[SparseWriter::kBlock] = {};
}  // namespace

Status SparseWriter::Put(const char* p, size_t n) {
  FS_RETURN_IF_ERROR(PwriteFull(fd_, std::string_view(p, n), off_, what_));
  written_ = off_ + n;
  return Status::OK();
}

Status SparseWriter::Blocks(const char* p, size_t n) {
  auto zero_block = [&](size_t at) {  // a short last block is data
    return n - at >= kBlock && std::memcmp(p + at, kZeros, kBlock) == 0;
  };
  while (n > 0) {
    if (zero_block(0)) {  // a hole: skipped
      p += kBlock;
      n -= kBlock;
      off_ += kBlock;
      continue;
    }
    size_t run = std::min(kBlock, n);  // data, and every following block that is not zeros
    while (run < n && !zero_block(run)) run += std::min(kBlock, n - run);
    FS_RETURN_IF_ERROR(Put(p, run));
    p += run;
    n -= run;
    off_ += run;
  }
  return Status::OK();
}

Status SparseWriter::Write(std::string_view piece) {
  if (data_tail_ > 0) {  // the last piece ended inside a block already written as data
    const size_t take = std::min(data_tail_, piece.size());
    FS_RETURN_IF_ERROR(Put(piece.data(), take));
    off_ += take;
    data_tail_ -= take;
    piece.remove_prefix(take);
    if (data_tail_ > 0) return Status::OK();
  } else if (partial_len_ > 0) {  // complete the block the last piece began
    const size_t take = std::min(kBlock - partial_len_, piece.size());
    if (take > 0) std::memcpy(partial_ + partial_len_, piece.data(), take);
    partial_len_ += take;
    piece.remove_prefix(take);
    if (partial_len_ < kBlock) return Status::OK();
    FS_RETURN_IF_ERROR(Blocks(partial_, kBlock));
    partial_len_ = 0;
  }
  const size_t whole = piece.size() / kBlock * kBlock, tail = piece.size() - whole;
  // A short last block with data in it is data whatever follows: written with the run before
  // it, so that a file given in one piece takes one pwrite. One of zeros waits for the rest.
  if (tail > 0 && std::memcmp(piece.data() + whole, kZeros, tail) != 0) {
    FS_RETURN_IF_ERROR(Blocks(piece.data(), piece.size()));
    data_tail_ = kBlock - tail;
    return Status::OK();
  }
  FS_RETURN_IF_ERROR(Blocks(piece.data(), whole));
  partial_len_ = tail;
  if (partial_len_ > 0) std::memcpy(partial_, piece.data() + whole, partial_len_);
  return Status::OK();
}

Status SparseWriter::Finish() {
  if (partial_len_ > 0) {  // the last, short block is data
    FS_RETURN_IF_ERROR(Put(partial_, partial_len_));
    off_ += partial_len_;
    partial_len_ = 0;
  }
  if (written_ == off_) return Status::OK();
  if (::ftruncate(fd_, static_cast<off_t>(off_)) != 0)
    return Status::FromErrno("set the size of " + what_, errno);
  return Status::OK();
}

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  UniqueFD fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd.valid()) return Status::FromErrno("create " + tmp, errno);
  // A .tmp left by a crash keeps its old mode through O_CREAT: the file gets the one asked for.
  Status s =
      ::fchmod(fd.get(), mode) == 0 ? Status::OK() : Status::FromErrno("chmod " + tmp, errno);
  if (s.ok()) s = WriteFull(fd.get(), data.data(), data.size(), tmp);
  if (s.ok() && ::fsync(fd.get()) != 0) s = Status::FromErrno("fsync " + tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = Status::FromErrno("rename " + tmp, errno);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Result<UniqueFD> OpenParentDir(int root_fd, const std::string& rel, std::string* leaf) {
  size_t slash = rel.rfind('/');
  *leaf = slash == std::string::npos ? rel : rel.substr(slash + 1);
  UniqueFD cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur.valid()) return Status::FromErrno("dup", errno);
  if (slash == std::string::npos) return cur;
  size_t start = 0;
  while (start < slash) {
    size_t end = rel.find('/', start);
    std::string comp = rel.substr(start, end - start);
    int fd = ::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open directory " + rel.substr(0, end), errno);
    cur.Reset(fd);
    start = end + 1;
  }
  return cur;
}

Status MakeDirs(int root_fd, const std::string& rel, mode_t mode) {
  UniqueFD cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur.valid()) return Status::FromErrno("dup", errno);
  size_t start = 0;
  while (start < rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string comp = rel.substr(start, end - start);
    if (::mkdirat(cur.get(), comp.c_str(), mode) != 0 && errno != EEXIST)
      return Status::FromErrno("create directory " + rel.substr(0, end), errno);
    int fd = ::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open directory " + rel.substr(0, end), errno);
    cur.Reset(fd);
    start = end + 1;
  }
  return Status::OK();
}

OpenFileLimit RaiseOpenFileLimit(rlim_t want) {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return {RLIM_INFINITY, RLIM_INFINITY, RLIM_INFINITY};
  const rlim_t was = rl.rlim_cur;
  const rlim_t to = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  if (was != RLIM_INFINITY && to != RLIM_INFINITY && to > was) {
    rl.rlim_cur = to;
    if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) return {was, to, rl.rlim_max};
  }
  return {was, was, rl.rlim_max};
}

}  // namespace fanstore
