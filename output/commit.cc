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
Result<uint64_t> Copy(int in, int out, uint64_t size, const std::string& rel) {
  std::vector<char> buf(kChunk);
  Xxh3Stream hash;
  uint64_t done = 0;
  while (true) {
    const ssize_t n = ::pread(in, buf.data(), buf.size(), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + rel, errno);
    if (n == 0) break;
    hash.Update(buf.data(), static_cast<size_t>(n));
    FS_RETURN_IF_ERROR(WriteFull(out, buf.data(), static_cast<size_t>(n), "write " + rel));
    done += static_cast<uint64_t>(n);
  }
  if (done != size) return Status::Aborted(rel + " changed size while it was copied");
  return hash.Digest();
}

Result<uint64_t> HashOf(int fd, uint64_t size, const std::string& what) {
  std::vector<char> buf(kChunk);
  Xxh3Stream hash;
  for (uint64_t off = 0; off < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    FS_RETURN_IF_ERROR(PreadFull(fd, buf.data(), n, off, what));
    hash.Update(buf.data(), n);
    off += n;
  }
  return hash.Digest();
}

}  // namespace

Result<Committed> CommitFile(int src, int dst, const std::string& rel, mode_t umask) {
  if (!IsCanonicalPath(rel, NAME_MAX)) return Status::InvalidArgument("bad output path " + rel);
  const std::vector<std::string_view> parts = Split(rel, '/');
  const std::string leaf(parts.back());
  auto from_dir = OpenParentDir(src, parts, false, umask, rel);
  if (!from_dir.ok()) return from_dir.status();
  UniqueFD in(::openat(from_dir->get(), leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat before, after;
  if (!in.valid() || ::fstat(in.get(), &before) != 0)
    return Status::FromErrno("open " + rel, errno);
  if (!S_ISREG(before.st_mode)) return Status::InvalidArgument(rel + " is not a regular file");
  auto to_dir = OpenParentDir(dst, parts, true, umask, rel);
  if (!to_dir.ok()) return to_dir.status();
  std::string tmp;
  UniqueFD out;
  for (int tries = 0; tries < 100 && !out.valid(); tries++) {
    tmp = TempName(leaf);
    out.Reset(::openat(to_dir->get(), tmp.c_str(),
                       O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid() && errno != EEXIST) return Status::FromErrno("create a copy of " + rel, errno);
  }
  if (!out.valid()) return Status::IOError("cannot create a temporary copy of " + rel);
  ScopeExit drop_tmp([&] { ::unlinkat(to_dir->get(), tmp.c_str(), 0); });
  auto read = Copy(in.get(), out.get(), static_cast<uint64_t>(before.st_size), rel);
  if (!read.ok()) return read.status();
  if (::fstat(in.get(), &after) != 0) return Status::FromErrno("stat " + rel, errno);
  if (after.st_size != before.st_size || MtimeNs(after) != MtimeNs(before))
    return Status::Aborted(rel + " changed while it was copied");
  if (::fsync(out.get()) != 0) return Status::FromErrno("fsync the copy of " + rel, errno);
  auto written = HashOf(out.get(), static_cast<uint64_t>(before.st_size), "read back " + rel);
  if (!written.ok()) return written.status();
  if (*written != *read)
    return Status::Corruption("the copy of " + rel + " read back differs from what was written");
  if (::fchmod(out.get(), 0666 & ~umask) != 0) return Status::FromErrno("chmod " + rel, errno);
  if (::renameat(to_dir->get(), tmp.c_str(), to_dir->get(), leaf.c_str()) != 0)
    return Status::FromErrno("rename the copy of " + rel + " into place", errno);
  drop_tmp.Dismiss();
  if (::fsync(to_dir->get()) != 0) return Status::FromErrno("fsync the directory of " + rel, errno);
  return Committed{static_cast<uint64_t>(before.st_size), *written, MtimeNs(before)};
}

}  // namespace fanstore::output
