#include "image/mount_service.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/private_dir.h"
#include "image/mount.h"

namespace fanstore::image {
namespace {

constexpr char kData[] = "data";

Status Reply(int sock, const Status& st) {
  const std::string msg = st.ok() ? "0" : "1" + st.ToString();
  if (::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL) < 0)
    return Status::FromErrno("the mount service's answer", errno);
  return Status::OK();
}

// The answer to a request: '0', or '1' and why.
Status Answer(int sock, const char* what) {
  char buf[1024];
  ssize_t n;
  do {
    n = ::recv(sock, buf, sizeof buf, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno(std::string("the mount service's answer to ") + what, errno);
  if (n == 0) return Status::IOError(std::string("the mount service ended before ") + what);
  if (buf[0] == '0') return Status::OK();
  return Status::IOError(std::string(buf + 1, static_cast<size_t>(n - 1)));
}

// The image's root at data/ below the trusted local directory, when one is mounted there.
UniqueFD MountedRoot(int local) {
  UniqueFD root(::openat(local, kData, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct statfs fs;
  if (!root.valid() || ::fstatfs(root.get(), &fs) != 0 || fs.f_type != EROFS_SUPER_MAGIC_V1)
    return UniqueFD();
  return root;
}

Status Detach(int root) {
  const std::string self = "/proc/self/fd/" + std::to_string(root);
  if (::umount2(self.c_str(), MNT_DETACH) != 0)
    return Status::FromErrno("image: detach the mount", errno);
  return Status::OK();
}

// 'M': mounts the agent's tree and blob on local_dir/data. *root: the mount's root, to detach.
Status Mount(int tree, int blob, const std::string& local_dir, uid_t uid, gid_t gid,
             UniqueFD* root) {
  if (root->valid()) return Status::InvalidArgument("image: mounted already");
  auto local = OpenTrustedDir(local_dir, uid);
  if (!local.ok()) return local.status();
  UniqueFD target(::openat(local->get(), kData, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!target.valid() || ::fstat(target.get(), &st) != 0 || st.st_uid != uid)
    return Status::Permission("image: " + local_dir + "/data is not a directory of the job user's");
  // The metadata's directory: made here by root, so nobody else's; gone once the mount holds
  // the unnamed file.
  if (::mkdirat(local->get(), kMetaDirName, 0700) != 0)
    return Status::FromErrno("image: create " + local_dir + "/" + kMetaDirName, errno);
  UniqueFD meta_dir(
      ::openat(local->get(), kMetaDirName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  MountRequest req;
  req.tree_fd = tree;
  req.blob_fd = blob;
  req.meta_dir_fd = meta_dir.get();
  req.target_fd = target.get();
  req.owner = uid;
  req.group = gid;
  Status st_mount = meta_dir.valid() ? MountTree(req) : Status::FromErrno("image: open", errno);
  (void)::unlinkat(local->get(), kMetaDirName, AT_REMOVEDIR);
  FS_RETURN_IF_ERROR(st_mount);
  *root = MountedRoot(local->get());
  if (!root->valid()) return Status::IOError("image: mounted, then not found at " + local_dir);
  return Status::OK();
}

// One command byte with room for the two descriptors of 'M', as both ends send and receive it.
struct Message {
  char cmd = 0;
  int fds[2] = {-1, -1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  struct iovec iov = {&cmd, 1};
  struct msghdr msg = {};
  Message() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  Message(const Message&) = delete;  // iov and msg point into it
  Message& operator=(const Message&) = delete;
};

volatile sig_atomic_t g_stop = 0;
void OnTerm(int) { g_stop = 1; }

}  // namespace

void ServeMounts(int sock, const std::string& local_dir, uid_t uid, gid_t gid) {
  UniqueFD root;
  while (!g_stop) {
    struct pollfd p = {sock, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0) continue;  // EINTR: SIGTERM, looked at above
    Message m;
    int* fds = m.fds;
    const ssize_t n = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    const char cmd = m.cmd;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        std::memcpy(fds, CMSG_DATA(c), std::min(count, size_t{2}) * sizeof(int));
        for (size_t k = 2; k < count; k++) {  // more than asked for: closed
          int extra;
          std::memcpy(&extra, CMSG_DATA(c) + k * sizeof(int), sizeof extra);
          ::close(extra);
        }
      }
    const UniqueFD tree(fds[0]), blob(fds[1]);
    if (n <= 0 || cmd == 'U') break;  // the agent ended, or asks for the unmount
    if (cmd == 'M' && tree.valid() && blob.valid())
      (void)Reply(sock, Mount(tree.get(), blob.get(), local_dir, uid, gid, &root));
    else
      (void)Reply(sock, Status::InvalidArgument("image: not a request of the mount service's"));
  }
  (void)Reply(sock, root.valid() ? Detach(root.get()) : Status::OK());
  // The agent goes on with its shutdown; the kernel frees the image's inodes and dentries here,
  // when this last reference goes (seconds at a million files).
  root.Reset();
}

Result<UniqueFD> StartMountService(const std::string& local_dir, uid_t uid, gid_t gid) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return Status::FromErrno("image: the mount service's socket", errno);
  UniqueFD ours(sv[0]), theirs(sv[1]);
  const pid_t child = ::fork();
  if (child < 0) return Status::FromErrno("image: start the mount service", errno);
  if (child == 0) {
    // Nothing of slurmstepd's but the socket; no signal from the job user reaches a process
    // whose ids are root's.
    ::prctl(PR_SET_NAME, "fanstore-mount");
    const int null = ::open("/dev/null", O_RDWR);
    if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 || ::dup2(null, 2) < 0 ||
        ::dup2(ours.get(), 3) < 0)
      ::_exit(1);
    ::close_range(4, ~0U, 0);
    struct sigaction sa = {};
    sa.sa_handler = OnTerm;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ServeMounts(3, local_dir, uid, gid);
    ::_exit(0);
  }
  // The agent's end survives its exec.
  if (::fcntl(theirs.get(), F_SETFD, 0) != 0)
    return Status::FromErrno("image: the mount service's socket", errno);
  return theirs;
}

Status AskMount(int sock, int tree_fd, int blob_fd) {
  Message m;
  m.cmd = 'M';
  const int fds[2] = {tree_fd, blob_fd};
  struct cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (::sendmsg(sock, &m.msg, MSG_NOSIGNAL) < 0)
    return Status::FromErrno("image: ask the mount service", errno);
  return Answer(sock, "the mount");
}

Status AskUnmount(int sock) {
  const char cmd = 'U';
  if (::send(sock, &cmd, 1, MSG_NOSIGNAL) < 0)
    return Status::FromErrno("image: ask the mount service", errno);
  return Answer(sock, "the unmount");
}

UniqueFD FindImage(const std::string& local_dir, uid_t uid) {
  auto local = OpenTrustedDir(local_dir, uid);
  return local.ok() ? MountedRoot(local->get()) : UniqueFD();  // none, or nowhere root may work
}

Status DetachImage(const std::string& local_dir, uid_t uid, bool* detached) {
  *detached = false;
  UniqueFD root = FindImage(local_dir, uid);
  if (!root.valid()) return Status::OK();
  FS_RETURN_IF_ERROR(Detach(root.get()));
  *detached = true;
  return Status::OK();
}

}  // namespace fanstore::image
