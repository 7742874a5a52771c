// `fanstore doctor`'s read-path check (issue 31): which way this node's local copy is kept and
// read, and why. As root it proves the kernel-native path the way the agent takes it: a small
// EROFS image written into the local directory and mounted through image/mount.h in a mount
// namespace of a child's own, then read back.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cli/doctor.h"
#include "common/io.h"
#include "image/erofs.h"
#include "image/mount.h"

namespace fanstore::cli::doctor {
namespace {

constexpr char kProbeBytes[] = "fanstore doctor probe\n";
constexpr unsigned kProbeSeconds = 20;

// In the child, in its own mount namespace: "" when a one-file image mounted from `dir` reads
// back, else why not.
std::string ProbeIn(const std::string& dir) {
  if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare: ") + std::strerror(errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("make / private: ") + std::strerror(errno);
  std::vector<image::Node> nodes(2);
  nodes[0].mode = S_IFDIR | 0755;
  nodes[1].name = "probe";
  nodes[1].mode = S_IFREG | 0644;
  nodes[1].size = sizeof kProbeBytes - 1;
  auto img = image::ErofsImage::Plan(nodes, {});
  if (!img.ok()) return img.status().ToString();
  auto create = [&](const char* name) {
    return UniqueFD(
        ::open((dir + "/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  };
  UniqueFD tree = create("tree"), blob = create("blob");
  if (!tree.valid() || !blob.valid()) return std::string("create: ") + std::strerror(errno);
  Status st = PwriteFull(blob.get(), std::string_view(kProbeBytes, nodes[1].size),
                         img->BlobOffset(1), "the probe's blob");
  if (st.ok() && ::ftruncate(blob.get(), static_cast<off_t>(img->blob_size())) != 0)
    st = Status::FromErrno("size the probe's blob", errno);
  if (st.ok()) st = image::WriteTree(tree.get(), nodes, {}, img->blob_size());
  const std::string mnt = dir + "/mnt";
  if (st.ok() && ::mkdir(mnt.c_str(), 0700) != 0) st = Status::FromErrno("mkdir " + mnt, errno);
  if (!st.ok()) return st.ToString();
  UniqueFD meta_dir(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFD target(::open(mnt.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  image::MountRequest req;
  req.tree_fd = tree.get();
  req.blob_fd = blob.get();
  req.meta_dir_fd = meta_dir.get();
  req.target_fd = target.get();
  req.owner = ::getuid();
  req.group = ::getgid();
  st = image::MountTree(req);
  if (!st.ok()) return st.message();
  auto back = ReadSmallFile(mnt + "/probe", 4096);
  (void)::umount2(mnt.c_str(), MNT_DETACH);
  if (!back.ok()) return "the mounted image: " + back.status().message();
  return *back == kProbeBytes ? "" : "the mounted image read back other bytes";
}

// The probe in a child (its mount namespace dies with it); "" when the image mounted.
std::string Probe(const std::string& local_dir) {
  std::string dir = local_dir + "/.fanstore-doctor.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr)
    return "cannot create a directory in " + local_dir + ": " + std::strerror(errno);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    const int err = errno;
    (void)RemoveTree(dir);
    return std::string("pipe: ") + std::strerror(err);
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    ::alarm(kProbeSeconds);  // a probe that hangs is killed, and says so below
    const std::string why = ProbeIn(dir);
    const std::string said = why.empty() ? "ok" : why;
    (void)!::write(p[1], said.data(), said.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string said;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) said.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int ws = 0;
  while (child > 0 && ::waitpid(child, &ws, 0) < 0 && errno == EINTR) {
  }
  std::string why = said == "ok" ? "" : said;
  if (child < 0)
    why = "fork failed";
  else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
    why = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM
              ? "the probe did not finish in " + std::to_string(kProbeSeconds) + " s"
              : "the probe ended abnormally (status " + std::to_string(ws) + ")";
  else if (said.empty())
    why = "the probe said nothing";
  (void)RemoveTree(dir);
  return why;
}

std::string Kernel() {
  struct utsname u;
  return ::uname(&u) == 0 ? std::string(" (Linux ") + u.release + ")" : "";
}

}  // namespace

void CheckReadPath(const std::string& local_dir, bool image, Report* r) {
  struct statfs fs;
  if (::statfs(local_dir.c_str(), &fs) != 0) return;  // CheckLocalDir said why
  const std::string files = "jobs keep a file per dataset file in " + local_dir;
  if (fs.f_type == 0x01021994) {
    r->Ok("read-path", files +
                           " (tmpfs: the job's own, dropped whole at its end); no EROFS "
                           "image: the kernel mounts none from tmpfs");
    return;
  }
  if (!image) {
    r->Ok("read-path", files + " (image=no: a create and an unlink per file on this disk)");
    return;
  }
  if (::geteuid() != 0) {
    r->Ok("read-path",
          "jobs keep their share in " + local_dir +
              " as an EROFS image where the kernel mounts one from a file" + Kernel() +
              ", else a file per dataset file (run fanstore doctor as root to "
              "probe it); fanstore run as this user keeps files (mounting needs root)");
    return;
  }
  const std::string why = Probe(local_dir);
  if (why.empty())
    r->Ok("read-path", "jobs keep their share in " + local_dir +
                           " as an EROFS image, mounted by the plugin's mount service (and by "
                           "fanstore run as root)" +
                           Kernel() + ": probed, it mounts from a file and reads back");
  else
    r->Warn("read-path",
            files +
                " (a create and an unlink per file on this disk): the kernel refused an "
                "EROFS image" +
                Kernel() + ": " + why,
            "a kernel with EROFS and file-backed mounts (Linux 6.12+, "
            "CONFIG_EROFS_FS_BACKED_BY_FILE) stages and tears down on disk in seconds");
}

}  // namespace fanstore::cli::doctor
