// Committing one finished output file (see commit.h).
#include "output/commit.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <vector>

#include "common/hash.h"
#include "common/io.h"
#include "common/path.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace fanstore::output {
namespace {

constexpr size_t kChunk = 1 << 20;

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// The directory that holds `rel`'s last component, below `root`, opened by descriptor; made
// (0777 & ~umask) where missing when `make`.
Result<UniqueFD> OpenParentDir(int root, const std::vector<std::string_view>& parts, bool make,
                               mode_t umask, const std::string& rel) {
  UniqueFD cur(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (!cur.valid()) return Status::FromErrno("dup", errno);
  for (size_t i = 0; i + 1 < parts.size(); i++) {
    const std::string name(parts[i]);
    if (make && ::mkdirat(cur.get(), name.c_str(), 0777 & ~umask) != 0 && errno != EEXIST)
      return Status::FromErrno("create the directories of " + rel, errno);
    UniqueFD next(
        ::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return Status::FromErrno("open the directories of " + rel, errno);
    cur = std::move(next);
  }
  return cur;
}

std::string TempName(std::string_view leaf) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string name = "." + std::string(leaf) + kTempMarker;
  for (int i = 0; i < 6; i++) name += kChars[rd() % (sizeof kChars - 1)];
  return name;
}

// Copies all of `in` to `out`, returning the hash of what was read.
Result<uint64_t> Copy(int in, int out, uint64_t size, const CommitRequest& req) {
  std::vector<char> buf(kChunk);
  Xxh3Stream hash;
  uint64_t done = 0;
  while (true) {
    if (req.cancel != nullptr && req.cancel->load())
      return Status::Aborted("the deadline came while it was being copied");
    const auto t0 = std::chrono::steady_clock::now();
    const ssize_t n = ::pread(in, buf.data(), buf.size(), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + req.rel, errno);
    if (n == 0) break;
    hash.Update(buf.data(), static_cast<size_t>(n));
    FS_RETURN_IF_ERROR(WriteFull(out, buf.data(), static_cast<size_t>(n), "write " + req.as));
    done += static_cast<uint64_t>(n);
    if (req.pace) req.pace(std::chrono::steady_clock::now() - t0);
  }
  if (done != size) return Status::Aborted(req.rel + " changed size while it was copied");
  return hash.Digest();
}

// Puts `tmp` in place as `leaf` in `dir`; without `replace`, only where nothing is there yet
// (renameat2 NOREPLACE, or link and unlink where the file system lacks it). False: taken.
Result<bool> PutInPlace(int dir, const std::string& tmp, const std::string& leaf, bool replace) {
  if (replace) {
    if (::renameat(dir, tmp.c_str(), dir, leaf.c_str()) != 0)
      return Status::FromErrno("rename", errno);
    return true;
  }
  if (::renameat2(dir, tmp.c_str(), dir, leaf.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS) return Status::FromErrno("rename", errno);
  if (::linkat(dir, tmp.c_str(), dir, leaf.c_str(), 0) != 0)
    return errno == EEXIST ? Result<bool>(false) : Status::FromErrno("link", errno);
  ::unlinkat(dir, tmp.c_str(), 0);
  return true;
}

Result<uint64_t> HashOf(int fd, uint64_t size, const std::string& what, const CommitRequest& req) {
  std::vector<char> buf(kChunk);
  Xxh3Stream hash;
  for (uint64_t off = 0; off < size;) {
    if (req.cancel != nullptr && req.cancel->load())
      return Status::Aborted("the deadline came while it was being read back");
    const auto t0 = std::chrono::steady_clock::now();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    FS_RETURN_IF_ERROR(PreadFull(fd, buf.data(), n, off, what));
    hash.Update(buf.data(), n);
    off += n;
    if (req.pace) req.pace(std::chrono::steady_clock::now() - t0);
  }
  return hash.Digest();
}

}  // namespace

Result<Committed> CommitFile(const CommitRequest& req) {
  const std::string& rel = req.rel;
  if (!IsCanonicalPath(rel, NAME_MAX) || !IsCanonicalPath(req.as, NAME_MAX))
    return Status::InvalidArgument("bad output path " + rel + " (to " + req.as + ")");
  const std::vector<std::string_view> from = Split(rel, '/'), to = Split(req.as, '/');
  auto from_dir = OpenParentDir(req.src, from, false, req.umask, rel);
  if (!from_dir.ok()) return from_dir.status();
  const std::string leaf(from.back()), as_leaf(to.back());
  UniqueFD in(::openat(from_dir->get(), leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat before, after;
  if (!in.valid() || ::fstat(in.get(), &before) != 0)
    return Status::FromErrno("open " + rel, errno);
  if (!S_ISREG(before.st_mode)) return Status::InvalidArgument(rel + " is not a regular file");
  auto to_dir = OpenParentDir(req.dst, to, true, req.umask, req.as);
  if (!to_dir.ok()) return to_dir.status();
  std::string tmp;
  UniqueFD out;
  for (int tries = 0; tries < 100 && !out.valid(); tries++) {
    tmp = TempName(as_leaf);
    out.Reset(::openat(to_dir->get(), tmp.c_str(),
                       O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid() && errno != EEXIST)
      return Status::FromErrno("create a copy of " + req.as, errno);
  }
  if (!out.valid()) return Status::IOError("cannot create a temporary copy of " + req.as);
  ScopeExit drop_tmp([&] { ::unlinkat(to_dir->get(), tmp.c_str(), 0); });
  auto read = Copy(in.get(), out.get(), static_cast<uint64_t>(before.st_size), req);
  if (!read.ok()) return read.status();
  if (::fstat(in.get(), &after) != 0) return Status::FromErrno("stat " + rel, errno);
  if (after.st_size != before.st_size || MtimeNs(after) != MtimeNs(before))
    return Status::Aborted(rel + " changed while it was copied");
  if (::fsync(out.get()) != 0) return Status::FromErrno("fsync the copy of " + req.as, errno);
  // What the servers hold, not what this client still caches (clean pages, after the fsync).
  (void)::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  auto written =
      HashOf(out.get(), static_cast<uint64_t>(before.st_size), "read back " + req.as, req);
  if (!written.ok()) return written.status();
  if (*written != *read)
    return Status::Corruption("the copy of " + rel + " read back differs from what was written");
  if (::fchmod(out.get(), 0666 & ~req.umask) != 0)
    return Status::FromErrno("chmod " + req.as, errno);
  Committed c{static_cast<uint64_t>(before.st_size), *written, MtimeNs(before), false};
  auto placed = PutInPlace(to_dir->get(), tmp, as_leaf, req.replace);
  if (!placed.ok()) return placed.status().Prefixed("put the copy of " + rel + " in place");
  c.name_taken = !*placed;
  if (c.name_taken) return c;  // drop_tmp removes the copy
  drop_tmp.Dismiss();
  if (::fsync(to_dir->get()) != 0)
    return Status::FromErrno("fsync the directory of " + req.as, errno);
  return c;
}

}  // namespace fanstore::output
