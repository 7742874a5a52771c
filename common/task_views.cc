#include "common/task_views.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/path.h"
#include "common/proto.h"

namespace fanstore {

Result<UniqueFD> MountFuse(int target, uid_t uid, gid_t gid) {
  UniqueFD dev(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (!dev.valid()) return Status::FromErrno("open /dev/fuse", errno);
  const std::string opts = "fd=" + std::to_string(dev.get()) +
                           ",rootmode=40000,user_id=" + std::to_string(uid) +
                           ",group_id=" + std::to_string(gid) + ",default_permissions,allow_other";
  const std::string where = "/proc/self/fd/" + std::to_string(target);
  if (::mount("fanstore", where.c_str(), "fuse.fanstore", MS_RDONLY | MS_NOSUID | MS_NODEV,
              opts.c_str()) != 0)
    return Status::FromErrno("mount a FUSE file system", errno);
  return dev;
}

Status ReadOnlyView(const std::string& dir, uid_t uid) {
  // `dir` opened by name, without following a link, only when it is still the directory `st`
  // describes: what a mount takes, through /proc/self/fd, cannot be swapped in between.
  auto reopen = [&dir](const struct stat& st) {
    UniqueFD fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat now;
    if (fd.valid() &&
        (::fstat(fd.get(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev))
      fd.Reset();
    return fd;
  };
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::FromErrno("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
    return Status::Permission(dir + " is not a directory of the job user");
  // Opened in the new namespace (a bind takes its source from there), without following a
  // link, and checked to be the directory seen above.
  UniqueFD fd = reopen(st);
  if (!fd.valid()) return Status::IOError(dir + " changed while it was being mounted");
  const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
  if (::mount(self.c_str(), self.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return Status::FromErrno("bind mount " + dir, errno);
  // The new mount's root, by name again; it must be the directory bound above.
  UniqueFD top = reopen(st);
  if (!top.valid()) return Status::IOError(dir + " changed while it was being mounted");
  const std::string bound = "/proc/self/fd/" + std::to_string(top.get());
  if (::mount(nullptr, bound.c_str(), nullptr,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return Status::FromErrno("remount " + dir + " read-only", errno);
  return Status::OK();
}

Status PrivateMountNamespace() {
  if (::unshare(CLONE_NEWNS) != 0) return Status::FromErrno("unshare(CLONE_NEWNS)", errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return Status::FromErrno("make / a slave mount", errno);
  return Status::OK();
}

namespace {

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  for (size_t pos = 1; pos < path.size();) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    out.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return out;
}

// Walks `comps` from /, through directories only, never a symlink. Returns the descriptor
// (O_PATH) of the deepest one that exists; *depth tells how many components it is.
Result<UniqueFD> WalkExisting(const std::vector<std::string>& comps, size_t* depth) {
  UniqueFD cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return Status::FromErrno("open /", errno);
  std::string seen;
  for (*depth = 0; *depth < comps.size(); ++*depth) {
    seen += "/" + comps[*depth];
    UniqueFD next(
        ::openat(cur.get(), comps[*depth].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      if (errno == ENOENT) break;
      return Status::FromErrno(seen + " (a directory, not a symlink, is needed)", errno);
    }
    cur = std::move(next);
  }
  return cur;
}

Result<bool> IsEmptyDir(int dir) {
  const std::string self = "/proc/self/fd/" + std::to_string(dir);
  DIR* d = ::opendir(self.c_str());
  if (!d) return Status::FromErrno("list a directory", errno);
  bool empty = true;
  while (struct dirent* de = ::readdir(d))
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) empty = false;
  ::closedir(d);
  return empty;
}

std::string Joined(const std::vector<std::string>& comps, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; i++) out += "/" + comps[i];
  return out.empty() ? "/" : out;
}

}  // namespace

namespace {

// The kernel-visible view's mount point: `mount` itself, or made in a small tmpfs on its deepest
// existing ancestor, an empty directory (MountKernelView). An O_PATH descriptor of it.
Result<UniqueFD> ViewMountPoint(const std::string& mount) {
  if (!IsCleanAbsolutePath(mount))
    return Status::InvalidArgument("the mount " + mount + " is not a clean absolute path");
  const std::vector<std::string> comps = Components(mount);
  size_t depth = 0;
  auto at = WalkExisting(comps, &depth);
  if (!at.ok()) return at.status();
  if (depth < comps.size()) {
    const std::string base = Joined(comps, depth);
    auto empty = IsEmptyDir(at->get());
    if (!empty.ok()) return empty.status().Prefixed(base);
    if (!*empty)
      return Status::NotFound(Joined(comps, depth + 1) + " does not exist and " + base +
                              " is not empty (an empty directory there lets each task see its "
                              "own dataset at " +
                              mount + ")");
    const std::string self = "/proc/self/fd/" + std::to_string(at->get());
    if (::mount("fanstore", self.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "mode=0755,size=64k,nr_inodes=256") != 0)
      return Status::FromErrno("mount a tmpfs on " + base, errno);
    // The walk again, into the tmpfs now on top, then the missing components in it.
    size_t again = 0;
    at = WalkExisting(comps, &again);
    if (!at.ok()) return at.status();
    if (again != depth) return Status::IOError(base + " changed while it was being mounted");
    for (; depth < comps.size(); depth++) {
      if (::mkdirat(at->get(), comps[depth].c_str(), 0755) != 0)
        return Status::FromErrno("create " + Joined(comps, depth + 1) + " in a tmpfs", errno);
      UniqueFD next(
          ::openat(at->get(), comps[depth].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next.valid()) return Status::FromErrno("open " + Joined(comps, depth + 1), errno);
      *at = std::move(next);
    }
  }
  return at;
}

}  // namespace

Result<UniqueFD> MountKernelView(const std::string& mount, uid_t uid, gid_t gid) {
  auto at = ViewMountPoint(mount);
  if (!at.ok()) return at.status();
  auto dev = MountFuse(at->get(), uid, gid);
  if (!dev.ok()) return dev.status().Prefixed(mount);
  return dev;
}

Status BindKernelView(const std::string& mount, const std::string& dir) {
  UniqueFD src(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!src.valid()) return Status::FromErrno("open " + dir, errno);
  return BindKernelView(mount, src.get());
}

Status BindKernelView(const std::string& mount, int dir) {
  auto at = ViewMountPoint(mount);
  if (!at.ok()) return at.status();
  const std::string from = "/proc/self/fd/" + std::to_string(dir);
  const std::string to = "/proc/self/fd/" + std::to_string(at->get());
  if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return Status::FromErrno("bind on " + mount, errno);
  if (::mount(nullptr, mount.c_str(), nullptr,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return Status::FromErrno("make " + mount + " read-only", errno);
  return Status::OK();
}

Status HandOverView(const std::string& socket, int dev) {
  UniqueFD sock(proto::Connect(socket.c_str(), 30000));
  if (!sock.valid()) return Status::IOError("cannot reach the agent at " + socket);
  proto::Frame f{proto::kMagic, proto::kServeView, 0, 0};
  if (int rc = proto::Send(sock.get(), f, nullptr, dev); rc != 0)
    return Status::FromErrno("send to the agent", -rc);
  char msg[512];
  if (int rc = proto::Recv(sock.get(), &f, msg, sizeof msg - 1, nullptr); rc != 0)
    return Status::FromErrno("the agent's answer", -rc);
  msg[f.len] = '\0';
  if (f.status != 0) return Status::FromErrno(std::string("the agent: ") + msg, f.status);
  return Status::OK();
}

}  // namespace fanstore
