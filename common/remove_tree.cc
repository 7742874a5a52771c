#include "common/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "common/unique_fd.h"

namespace fanstore {
namespace {

constexpr int kMaxDepth = 32;  // open descriptors at once; deeper directories move up

struct Walk {
  int top;  // the tree's root, where too-deep directories are moved
  dev_t dev;
  const std::string& path;
  unsigned moved = 0;
  Status first;
  bool seize = false;  // each directory becomes root's before it is listed, each file is emptied
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  void Fail(const char* what, const char* name, int err) {
    if (first.ok())
      first = Status::FromErrno(
          std::string(what) + " " + path + ": '" + std::string(name).substr(0, 255) + "'", err);
  }

  // Seized: a file's pages are freed even while someone holds it open.
  void Truncate(int dir, const char* name) {
    UniqueFD f(::openat(dir, name, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
    struct stat st;
    if (f.valid() && ::fstat(f.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == dev)
      (void)::ftruncate(f.get(), 0);
  }

  // Empties the directory open as `fd`, `depth` levels below the top.
  void Empty(int fd, int depth) {
    if (std::chrono::steady_clock::now() > deadline)
      return Fail("stop (the time allowed ran out) in", ".", ETIMEDOUT);
    // Seized, its user can add nothing to it through a descriptor they hold: what is listed
    // next is all it will ever hold.
    if (seize && ::fchown(fd, 0, 0) != 0) return Fail("take", ".", errno);
    ::fchmod(fd, 0700);  // a read-only directory cannot be emptied; fchmod follows nothing
    UniqueFD dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    DIR* d = dup.valid() ? ::fdopendir(dup.get()) : nullptr;
    if (!d) return Fail("read", ".", errno);
    dup.Release();
    ::rewinddir(d);  // the duplicate shares the offset an earlier pass left at the end
    // Names with their type from readdir: a file is unlinked with one system call.
    std::vector<std::pair<std::string, unsigned char>> names;
    while (struct dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        names.emplace_back(e->d_name, e->d_type);
    ::closedir(d);
    for (const auto& [name, type] : names) {
      if (type != DT_DIR && type != DT_UNKNOWN) {
        if (seize && type == DT_REG) Truncate(fd, name.c_str());
        if (::unlinkat(fd, name.c_str(), 0) == 0 || errno == ENOENT) continue;
        if (errno != EISDIR) {
          Fail("unlink in", name.c_str(), errno);
          continue;
        }  // replaced by a directory since: looked at below
      }
      struct stat st;
      if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (!S_ISDIR(st.st_mode)) {
        if (seize && S_ISREG(st.st_mode)) Truncate(fd, name.c_str());
        if (::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT)
          Fail("unlink in", name.c_str(), errno);
        continue;
      }
      if (st.st_dev != dev) {  // a mount point: not ours to descend into
        Fail("remove (a file system is mounted there) in", name.c_str(), EBUSY);
        continue;
      }
      if (depth + 1 >= kMaxDepth && fd != top) {
        // Too deep to hold another descriptor: move it up to the top, emptied on a later pass
        // (seized first: nothing can be added to it meanwhile).
        if (seize && ::fchownat(fd, name.c_str(), 0, 0, AT_SYMLINK_NOFOLLOW) != 0) {
          Fail("take", name.c_str(), errno);
          continue;
        }
        int rc = -1;
        for (int tries = 0; tries < 100 && rc != 0; tries++) {
          const std::string up = ".fanstore-rm-" + std::to_string(moved++);
          rc = ::renameat2(fd, name.c_str(), top, up.c_str(), RENAME_NOREPLACE);
          if (rc != 0 && errno != EEXIST) break;
        }
        if (rc != 0) Fail("move up in", name.c_str(), errno);
        continue;
      }
      UniqueFD child(::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child.valid()) {
        if (errno != ENOENT) Fail("open in", name.c_str(), errno);
        continue;
      }
      Empty(child.get(), depth + 1);
      if (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT && errno != ENOTEMPTY)
        Fail("rmdir in", name.c_str(), errno);
    }
  }
};

bool IsEmpty(int fd) {
  UniqueFD dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  DIR* d = dup.valid() ? ::fdopendir(dup.get()) : nullptr;
  if (!d) return false;
  dup.Release();
  ::rewinddir(d);
  bool empty = true;
  while (struct dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
  ::closedir(d);
  return empty;
}

// The directories below `top` (on its file system), emptied and removed on `threads` threads: a
// tree of a million files spread over class directories goes about as many times faster. The
// level taken is the first, from one to four levels down, with several directories for each
// thread (a staged dataset's classes sit three levels below a `fanstore run` directory, under
// data/train); a directory with none below it is taken where it is. Directories are opened only
// while a level has fewer than that, so few descriptors are held. What is left (files above
// the level, errors) is for the sequential pass.
void RemoveSubtreesInParallel(int top, dev_t dev, const std::string& path, size_t threads) {
  struct Sub {
    std::shared_ptr<UniqueFD> parent;
    std::string name;
  };
  auto list_dirs = [](int fd, std::vector<std::string>* out) {
    UniqueFD dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    DIR* d = dup.valid() ? ::fdopendir(dup.get()) : nullptr;
    if (!d) return;
    dup.Release();
    ::rewinddir(d);
    while (struct dirent* e = ::readdir(d))
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 &&
          std::strcmp(e->d_name, "..") != 0)
        out->emplace_back(e->d_name);
    ::closedir(d);
  };
  auto top_fd = std::make_shared<UniqueFD>(::fcntl(top, F_DUPFD_CLOEXEC, 0));
  if (!top_fd->valid()) return;
  std::vector<std::string> first;
  list_dirs(top, &first);
  std::vector<Sub> subs;
  for (std::string& n : first) subs.push_back({top_fd, std::move(n)});
  constexpr int kMaxLevels = 4;
  for (int level = 1; level < kMaxLevels && subs.size() < 4 * threads; level++) {
    std::vector<Sub> next;
    bool deeper = false;
    for (Sub& s : subs) {
      auto fd = std::make_shared<UniqueFD>(::openat(
          s.parent->get(), s.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat st;
      if (!fd->valid() || ::fstat(fd->get(), &st) != 0 || st.st_dev != dev) continue;
      std::vector<std::string> below;
      list_dirs(fd->get(), &below);
      if (below.empty()) next.push_back(std::move(s));
      deeper = deeper || !below.empty();
      for (std::string& n : below) next.push_back({fd, std::move(n)});
    }
    subs = std::move(next);
    if (!deeper) break;
  }
  if (subs.size() < 2) return;
  ParallelFor(subs.size(), threads, [&](size_t i) {
    const Sub& s = subs[i];
    UniqueFD fd(
        ::openat(s.parent->get(), s.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || st.st_dev != dev) return;
    Walk w{fd.get(), dev, path, 0, Status::OK()};
    w.Empty(fd.get(), 0);
    (void)::unlinkat(s.parent->get(), s.name.c_str(), AT_REMOVEDIR);
  });
}

}  // namespace

namespace {

// Empties `top` (see EmptyTree); errors name `path`.
Status EmptyDir(int top, const std::string& path, size_t threads, bool seize,
                std::chrono::steady_clock::time_point deadline) {
  struct stat st;
  if (::fstat(top, &st) != 0) return Status::FromErrno("stat " + path, errno);
  if (threads > 1 && !seize) RemoveSubtreesInParallel(top, st.st_dev, path, threads);
  Walk w{top, st.st_dev, path, 0, Status::OK(), seize, deadline};
  // Each pass removes up to kMaxDepth levels; what was deeper now sits at the top.
  bool empty = false;
  for (int pass = 0; pass < 100000 && w.first.ok() && !empty; pass++) {
    w.Empty(top, 0);
    empty = IsEmpty(top);
  }
  if (w.first.ok() && !empty) return Status::IOError(path + " was refilled while it was emptied");
  return w.first;
}

}  // namespace

Status EmptyTree(int dir, const std::string& name, bool seize,
                 std::chrono::steady_clock::time_point deadline) {
  return EmptyDir(dir, name, 1, seize, deadline);
}

Status RemoveTree(const std::string& path, size_t threads) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return errno == ENOENT ? Status::OK() : Status::FromErrno("stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Status::FromErrno("unlink " + path, errno);
    return Status::OK();
  }
  UniqueFD top(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top.valid()) return Status::FromErrno("open " + path, errno);
  FS_RETURN_IF_ERROR(
      EmptyDir(top.get(), path, threads, false, std::chrono::steady_clock::time_point::max()));
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT)
    return Status::FromErrno("rmdir " + path, errno);
  return Status::OK();
}

}  // namespace fanstore
