#include "spank-plugin/dirs.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>

#include "common/mountinfo.h"
#include "common/path.h"
#include "common/private_dir.h"
#include "common/remove_tree.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace fanstore::spank {
namespace {

std::string RandomSuffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;  // getrandom(2)
  std::string s;
  for (int i = 0; i < 10; i++) s += kChars[rd() % (sizeof kChars - 1)];
  return s;
}

bool IsOwnPrivateDir(const struct stat& st, uid_t uid) {
  return S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & 07777) == 0700;
}

// The directory `path` is in, opened, and the name in it.
struct Parent {
  UniqueFD fd;
  std::string path, leaf;
  struct stat st;
};

// The parent is reached by OpenTrustedDir: no symlink on the way, and nothing on it that a user
// other than root and `uid` could swap (issue 30, findings 3 and 4).
Status OpenParent(const std::string& path, uid_t uid, Parent* p) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash + 1 == path.size())
    return Status::InvalidArgument("bad directory " + path);
  p->path = slash == 0 ? "/" : path.substr(0, slash);
  p->leaf = path.substr(slash + 1);
  auto fd = OpenTrustedDir(p->path, uid);
  if (!fd.ok()) return fd.status();
  p->fd = std::move(fd.value());
  if (::fstat(p->fd.get(), &p->st) != 0) return Status::FromErrno("stat " + p->path, errno);
  return Status::OK();
}

// `dir` as a path that mount(2) and umount2(2) resolve to exactly that directory.
std::string FdPath(const UniqueFD& dir) { return "/proc/self/fd/" + std::to_string(dir.get()); }

}  // namespace

Status ClaimDir(const std::string& path, uid_t uid, gid_t gid, std::string* moved) {
  moved->clear();
  Parent p;
  FS_RETURN_IF_ERROR(OpenParent(path, uid, &p));
  const UniqueFD& parent = p.fd;
  const std::string &parent_path = p.path, &leaf = p.leaf;
  if (p.st.st_uid != 0) return Status::OK();  // a user's own directory: theirs to keep clean
  // Our directory first, under a name nobody can guess, then put in place in one step.
  std::string tmp;
  for (int tries = 0; tries < 100 && tmp.empty(); tries++) {
    std::string name = "." + leaf + ".claim-" + RandomSuffix();
    if (::mkdirat(parent.get(), name.c_str(), 0700) == 0)
      tmp = name;
    else if (errno != EEXIST)
      return Status::FromErrno("create a directory in " + parent_path, errno);
  }
  if (tmp.empty()) return Status::IOError("cannot create a directory in " + parent_path);
  UniqueFD dir(
      ::openat(parent.get(), tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid() || ::fchown(dir.get(), uid, gid) != 0 || ::fchmod(dir.get(), 0700) != 0) {
    const int err = errno;
    ::unlinkat(parent.get(), tmp.c_str(), AT_REMOVEDIR);
    return Status::FromErrno("prepare " + parent_path + "/" + tmp, err);
  }
  auto drop_tmp = [&] { ::unlinkat(parent.get(), tmp.c_str(), AT_REMOVEDIR); };
  // Other nodes' prologs and epilogs may claim and remove the same name at the same time on a
  // shared /dev/shm: every step re-checks what it found.
  for (int tries = 0; tries < 20; tries++) {
    if (::renameat2(parent.get(), tmp.c_str(), parent.get(), leaf.c_str(), RENAME_NOREPLACE) == 0)
      return Status::OK();
    if (errno != EEXIST) break;
    struct stat cur;
    if (::fstatat(parent.get(), leaf.c_str(), &cur, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      break;
    }
    if (IsOwnPrivateDir(cur, uid)) {
      drop_tmp();  // already the user's: keep it
      return Status::OK();
    }
    // Something planted: swap our directory in, in one step, and leave theirs beside it.
    if (::renameat2(parent.get(), tmp.c_str(), parent.get(), leaf.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno == ENOENT) continue;
      break;
    }
    struct stat out;
    if (::fstatat(parent.get(), tmp.c_str(), &out, AT_SYMLINK_NOFOLLOW) == 0 &&
        IsOwnPrivateDir(out, uid)) {
      // What we swapped out was the user's own after all (claimed meanwhile): swap it back.
      if (::renameat2(parent.get(), tmp.c_str(), parent.get(), leaf.c_str(), RENAME_EXCHANGE) == 0)
        drop_tmp();
      return Status::OK();
    }
    const std::string aside = leaf + ".planted-" + RandomSuffix();
    const bool renamed =
        ::renameat2(parent.get(), tmp.c_str(), parent.get(), aside.c_str(), RENAME_NOREPLACE) == 0;
    *moved = parent_path + "/" + (renamed ? aside : tmp);
    return Status::OK();
  }
  const int err = errno;
  drop_tmp();
  return Status::FromErrno("claim " + path, err);
}

Status MountJobFs(const std::string& path, uid_t uid, gid_t gid, bool* mounted) {
  *mounted = false;
  Parent p;
  FS_RETURN_IF_ERROR(OpenParent(path, uid, &p));
  // Root's, and where nobody else can move what root owns: written by root alone, or sticky.
  if (p.st.st_uid != 0 || ((p.st.st_mode & 022) && !(p.st.st_mode & S_ISVTX))) return Status::OK();
  struct statfs fs;
  if (::fstatfs(p.fd.get(), &fs) != 0) return Status::FromErrno("statfs " + p.path, errno);
  if (fs.f_type != TMPFS_MAGIC) return Status::OK();
  UniqueFD dir(::openat(p.fd.get(), p.leaf.c_str(), O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC));
  struct stat st, again;
  if (!dir.valid() || ::fstat(dir.get(), &st) != 0) return Status::FromErrno("open " + path, errno);
  if (st.st_dev != p.st.st_dev) return Status::OK();  // a mount point already: not ours to cover
  if (!IsOwnPrivateDir(st, uid))
    return Status::Permission(path + " is not a private directory of uid " + std::to_string(uid));
  // The mount point becomes root's first: in a sticky directory its user could otherwise rename
  // it, tmpfs and all (from a namespace where it is not mounted), out of the epilog's reach.
  // Then it must still be the one at `path`.
  if (::fchownat(dir.get(), "", 0, 0, AT_EMPTY_PATH) != 0)
    return Status::FromErrno("chown " + path, errno);
  auto give_back = [&] { (void)::fchownat(dir.get(), "", uid, gid, AT_EMPTY_PATH); };
  if (::fstatat(p.fd.get(), p.leaf.c_str(), &again, AT_SYMLINK_NOFOLLOW) != 0 ||
      again.st_ino != st.st_ino || again.st_dev != st.st_dev) {
    give_back();
    return Status::Permission(path + " was moved while the job's tmpfs was being mounted");
  }
  // The limits of the space it stands in for: what was free there (0 would mean no limit), and
  // its noexec. Named after the job, so that a leak shows in /proc/mounts.
  std::string opts = "mode=0700,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  if (fs.f_blocks > 0)
    opts += ",size=" + std::to_string(std::max<uint64_t>(fs.f_bavail, 1) * fs.f_bsize);
  if (fs.f_files > 0) opts += ",nr_inodes=" + std::to_string(std::max<uint64_t>(fs.f_ffree, 2));
  unsigned long flags = MS_NOSUID | MS_NODEV;
  if (fs.f_flags & ST_NOEXEC) flags |= MS_NOEXEC;
  if (::mount(p.leaf.c_str(), FdPath(dir).c_str(), "tmpfs", flags, opts.c_str()) != 0) {
    const int err = errno;
    give_back();
    return Status::FromErrno("mount a tmpfs for the job at " + path, err);
  }
  *mounted = true;
  return Status::OK();
}

namespace {

// `path` with no empty component: as /proc/self/mountinfo names a mount point.
std::string Normalized(const std::string& path) {
  std::string out;
  for (std::string_view c : Split(path, '/'))
    if (!c.empty()) out += "/" + std::string(c);
  return out.empty() ? "/" : out;
}

// The root of the job's tmpfs where another mount namespace has it, walked from that namespace's
// root (/proc/PID/root) without following a symlink; checked to be file system `dev`.
Result<UniqueFD> OpenInNamespace(const MountCopy& copy, dev_t dev) {
  UniqueFD cur(::open(("/proc/" + std::to_string(copy.pid) + "/root").c_str(),
                      O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (std::string_view c : Split(copy.mount_point, '/')) {
    if (!cur.valid()) break;
    if (c.empty()) continue;
    cur.Reset(::openat(cur.get(), std::string(c).c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  struct stat st;
  if (!cur.valid() || ::fstat(cur.get(), &st) != 0 || st.st_dev != dev)
    return Status::NotFound("the job's tmpfs in the mount namespace of pid " +
                            std::to_string(copy.pid));
  return cur;
}

std::string Describe(const std::vector<MountCopy>& copies) {
  std::string out;
  for (const MountCopy& c : copies)
    out += (out.empty() ? "" : ", ") + std::string("pid ") + std::to_string(c.pid) + " at " +
           c.mount_point;
  return out;
}

// Empties the detached job tmpfs through `root`, within a minute, and says how it went.
std::string EmptyHeld(int root, const std::string& path) {
  Status emptied = EmptyTree(root, path, /*seize=*/true,
                             std::chrono::steady_clock::now() + std::chrono::seconds(60));
  return emptied.ok() ? "emptied (files still open there hold only their size: 0)"
                      : "not emptied: " + emptied.message();
}

}  // namespace

Status DropJobFs(const std::string& path, uid_t uid, bool* dropped) {
  *dropped = false;
  Parent p;
  Status opened = OpenParent(path, uid, &p);
  // Missing, or where root never mounts (MountJobFs walks the same way): nothing of ours.
  if (!opened.ok())
    return opened.IsNotFound() || opened.code() == Status::Code::kPermission ? Status::OK()
                                                                             : opened;
  if (p.st.st_uid != 0) return Status::OK();
  // Through the parent's descriptor: nothing above it is resolved again.
  const std::string at = FdPath(p.fd) + "/" + p.leaf;
  // What is mounted there, from mountinfo: the file systems themselves are not asked, and one of
  // them may be a user's FUSE that never answers.
  const std::vector<MountEntry> stack = MountsAt(Normalized(path));
  auto ours = std::find_if(stack.begin(), stack.end(), [&](const MountEntry& e) {
    return e.type == "tmpfs" && e.source == p.leaf;  // MountJobFs names it after the job
  });
  if (stack.empty()) {
    // Not mounted: only MountJobFs leaves a directory of root's here, its mount point.
    struct stat st;
    if (::fstatat(p.fd.get(), p.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode) && st.st_uid == 0)
      ::unlinkat(p.fd.get(), p.leaf.c_str(), AT_REMOVEDIR);
    return Status::OK();
  }
  if (ours == stack.end()) return Status::OK();  // not the job's tmpfs: not ours to unmount
  // What the user stacked on it (fusermount3 on the tmpfs's root, which is hers) goes first:
  // only root can mount on the mount point itself, which is root's.
  for (auto above = stack.end() - ours - 1; above > 0; above--)
    if (::umount2(at.c_str(), UMOUNT_NOFOLLOW | MNT_DETACH) != 0)
      return Status::FromErrno("detach what was mounted over the job's tmpfs at " + path, errno);
  const dev_t dev = ours->dev;
  UniqueFD root(
      ::openat(p.fd.get(), p.leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  struct statfs fs;
  if (!root.valid() || ::fstat(root.get(), &st) != 0 || ::fstatfs(root.get(), &fs) != 0 ||
      st.st_dev != dev || fs.f_type != TMPFS_MAGIC || st.st_uid != uid)
    return Status::IOError("the job's tmpfs at " + path + " is not the one mounted there");
  // Held in another mount namespace (another user's user namespace made while it was mounted,
  // a process of the job's user that outlived it), unmounting here would leave it whole there.
  std::vector<MountCopy> elsewhere = MountsElsewhere(dev);
  if (elsewhere.empty()) {
    root.Reset();  // it would keep the mount busy
    if (::umount2(at.c_str(), UMOUNT_NOFOLLOW) == 0) {
      *dropped = true;
      ::unlinkat(p.fd.get(), p.leaf.c_str(), AT_REMOVEDIR);
      elsewhere = MountsElsewhere(dev);  // copied in the moment between: emptied there
      if (elsewhere.empty()) return Status::OK();
      auto there = OpenInNamespace(elsewhere.front(), dev);
      return Status::IOError(
          "the job's tmpfs at " + path + " was copied into another mount namespace (" +
          Describe(elsewhere) +
          "): " + (there.ok() ? EmptyHeld(there->get(), path) : there.status().message()));
    }
    if (errno != EBUSY) return Status::FromErrno("unmount the job's tmpfs at " + path, errno);
    root.Reset(
        ::openat(p.fd.get(), p.leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root.valid() || ::fstat(root.get(), &st) != 0 || st.st_dev != dev)
      return Status::IOError("the job's tmpfs at " + path + " changed while it was unmounted");
  }
  // Held: by a descriptor (anyone can hold its root with O_PATH: its path is known), or in
  // another namespace. Detached here and emptied through this namespace's view of it, in which
  // nothing is mounted inside it, every directory made root's first so that nothing can be
  // added meanwhile, every file truncated (issue 30, finding 1).
  if (::umount2(at.c_str(), UMOUNT_NOFOLLOW | MNT_DETACH) != 0)
    return Status::FromErrno("unmount the job's tmpfs at " + path, errno);
  *dropped = true;
  ::unlinkat(p.fd.get(), p.leaf.c_str(), AT_REMOVEDIR);
  const std::string held = elsewhere.empty()
                               ? "by a descriptor"
                               : "in another mount namespace (" + Describe(elsewhere) + ")";
  return Status::IOError("the job's tmpfs at " + path + " was still held " + held +
                         ": detached, and " + EmptyHeld(root.get(), path));
}

}  // namespace fanstore::spank

namespace fanstore::spank {

Status KernelViewAllowed(const std::string& mount, const std::string& prefix) {
  if (!IsCleanAbsolutePath(mount))
    return Status::InvalidArgument("the mount " + mount + " is not a clean absolute path");
  if (mount.size() <= prefix.size() + 1 || mount.compare(0, prefix.size(), prefix) != 0 ||
      mount[prefix.size()] != '/')
    return Status::Permission("the mount " + mount + " is not under mount_prefix " + prefix +
                              " (elsewhere the dataset could stand in for system files that "
                              "setuid programs read)");
  struct stat st;
  if (::lstat(prefix.c_str(), &st) != 0) return Status::FromErrno("mount_prefix " + prefix, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
    return Status::Permission("mount_prefix " + prefix +
                              " is not a directory of root's that only root can write");
  return Status::OK();
}

}  // namespace fanstore::spank
