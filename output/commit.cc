// Committing one finished output file (see commit.h).
#include "output/commit.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "common/io.h"
#include "common/path.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace fanstore::output {
namespace {

constexpr size_t kChunk = 1 << 20;
// Pieces read back at once (a helper's measurement through sshfs: 4 readers took the read back to
// the stand-in's own rate).
constexpr size_t kReadBackThreads = 4;

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

// Reads the piece of `fd` at `off`: kChunk bytes, fewer only at its end.
Result<size_t> ReadPiece(int fd, char* buf, uint64_t off, const std::string& what) {
  size_t got = 0;
  while (got < kChunk) {
    const ssize_t n = ::pread(fd, buf + got, kChunk - got, static_cast<off_t>(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(what, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

// Copies all of `in` to `out`, returning the hash of what was read; `pieces` gets the hash of each
// kChunk piece, against which the copy is read back.
Result<uint64_t> Copy(int in, int out, uint64_t size, const CommitRequest& req,
                      std::vector<uint64_t>* pieces) {
  std::vector<char> buf(kChunk);
  Xxh3Stream hash;
  uint64_t done = 0;
  while (true) {
    if (req.cancel != nullptr && req.cancel->load())
      return Status::Aborted("the deadline came while it was being copied");
    const auto t0 = std::chrono::steady_clock::now();
    auto n = ReadPiece(in, buf.data(), done, "read " + req.rel);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    hash.Update(buf.data(), *n);
    pieces->push_back(Xxh3(buf.data(), *n));
    FS_RETURN_IF_ERROR(WriteFull(out, buf.data(), *n, "write " + req.as));
    done += *n;
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

// Reads the copy back, kReadBackThreads pieces at a time, and checks each against the hash of the
// same piece of the source. One read at a time leaves a network file system's servers idle
// between the requests (sshfs: a reply's round trip per 64 KiB). The pieces' pacing is taken one
// at a time, so that a pause for the job holds every reader.
Status ReadBack(int fd, const std::vector<uint64_t>& pieces, const CommitRequest& req) {
  std::atomic<size_t> next{0};
  std::mutex mu;  // the first failure, and the pacing
  Status failed;
  std::atomic<bool> stop{false};
  const auto fail = [&](Status s) {
    std::lock_guard<std::mutex> l(mu);
    if (failed.ok()) failed = std::move(s);
    stop = true;
  };
  const auto reader = [&] {
    std::vector<char> buf(kChunk);
    for (size_t i = next++; i < pieces.size() && !stop; i = next++) {
      if (req.cancel != nullptr && req.cancel->load())
        return fail(Status::Aborted("the deadline came while it was being read back"));
      const auto t0 = std::chrono::steady_clock::now();
      auto n = ReadPiece(fd, buf.data(), uint64_t{i} * kChunk, "read back " + req.as);
      if (!n.ok()) return fail(n.status());
      if (Xxh3(buf.data(), *n) != pieces[i])
        return fail(Status::Corruption("the copy of " + req.rel +
                                       " read back differs from what was written"));
      if (req.pace) {
        std::lock_guard<std::mutex> l(mu);
        req.pace(std::chrono::steady_clock::now() - t0);
      }
    }
  };
  std::vector<std::thread> more;
  try {
    for (size_t t = 1; t < std::min<size_t>(kReadBackThreads, pieces.size()); t++)
      more.emplace_back(reader);
  } catch (const std::system_error&) {  // no thread to be had: fewer readers
  }
  reader();
  for (auto& t : more) t.join();
  return failed;
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
  std::vector<uint64_t> pieces;
  auto read = Copy(in.get(), out.get(), static_cast<uint64_t>(before.st_size), req, &pieces);
  if (!read.ok()) return read.status();
  if (::fstat(in.get(), &after) != 0) return Status::FromErrno("stat " + rel, errno);
  if (after.st_size != before.st_size || MtimeNs(after) != MtimeNs(before))
    return Status::Aborted(rel + " changed while it was copied");
  if (::fsync(out.get()) != 0) return Status::FromErrno("fsync the copy of " + req.as, errno);
  // What the servers hold, not what this client still caches (clean pages, after the fsync).
  (void)::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  FS_RETURN_IF_ERROR(ReadBack(out.get(), pieces, req));
  struct stat copy;
  if (::fstat(out.get(), &copy) != 0) return Status::FromErrno("stat the copy of " + req.as, errno);
  if (copy.st_size != before.st_size)
    return Status::Corruption("the copy of " + rel + " has " + std::to_string(copy.st_size) +
                              " bytes, not " + std::to_string(before.st_size));
  if (::fchmod(out.get(), 0666 & ~req.umask) != 0)
    return Status::FromErrno("chmod " + req.as, errno);
  Committed c{static_cast<uint64_t>(before.st_size), *read, MtimeNs(before), false};
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
