// `fanstore doctor`: checks that a node can run FanStore jobs, before the first one does. Each
// check prints one line, `ok`, `warn` or `FAIL`, and for a problem says what is wrong and what to
// do. Exit 0 when nothing FAILs, 1 otherwise. Here: the report, and the checks of the node
// (MUNGE, PMIx, the local directory, the kernel, the limits); the plugin's are in doctor_plugin.cc.
#include <dirent.h>
#include <dlfcn.h>
#include <munge.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/doctor.h"
#include "common/io.h"
#include "common/private_dir.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "spank-plugin/job.h"
#include "spank-plugin/node.h"
#include "spank-plugin/proc.h"

namespace fanstore::cli::doctor {

bool Report::Failed() const {
  for (const Check& c : checks_)
    if (c.status == "FAIL") return true;
  return false;
}

void Report::Print(bool json, bool quiet) const {
  nlohmann::json out = nlohmann::json::array();
  for (const Check& c : checks_) {
    if (quiet && c.status == "ok") continue;
    if (json) {
      out.push_back({{"check", c.name}, {"status", c.status}, {"detail", c.detail}});
      if (!c.fix.empty()) out.back()["fix"] = c.fix;
      continue;
    }
    std::printf("%-4s  %-12s %s%s%s\n", c.status.c_str(), c.name.c_str(), c.detail.c_str(),
                c.fix.empty() ? "" : ". Fix: ", c.fix.c_str());
  }
  if (json)
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

std::string Dirname(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::optional<std::string> Output(const std::vector<std::string>& argv) {
  // Through a shell for its 2>&1: srun says some things on its standard error.
  std::vector<std::string> sh = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  sh.insert(sh.end(), argv.begin(), argv.end());
  std::string out;
  const Result<int> rc = spank::RunCapture(sh, spank::ProcessEnvironment(), nullptr, 10000, &out);
  // 126 and 127: the shell could not run it (not executable, not there).
  if (!rc.ok() || rc.value() == 126 || rc.value() == 127) return std::nullopt;
  return out;
}

namespace {

constexpr uint64_t kLowSpace = 10ull << 30;  // below this a large dataset will not fit
constexpr uint64_t kLowInodes = 1000000;     // datasets of small files are staged as files
constexpr rlim_t kLowNofile = 65536;         // the agent keeps a descriptor per open shard

struct Options {
  std::string plugstack = "/etc/slurm/plugstack.conf";
  std::string local_dir;
  std::string munge_socket;
  bool json = false, quiet = false;
};

// ---- MUNGE -------------------------------------------------------------------------------

void CheckMunge(const Options& o, Report* r) {
  munge_ctx_t ctx = munge_ctx_create();
  if (!ctx) {
    r->Fail("munge", "cannot create a MUNGE context (out of memory)", "retry");
    return;
  }
  if (!o.munge_socket.empty()) munge_ctx_set(ctx, MUNGE_OPT_SOCKET, o.munge_socket.c_str());
  char* socket = nullptr;
  munge_ctx_get(ctx, MUNGE_OPT_SOCKET, &socket);
  const std::string sock = socket ? socket : "?";
  char* cred = nullptr;
  munge_err_t e = munge_encode(&cred, ctx, nullptr, 0);
  if (e == EMUNGE_SUCCESS) {
    e = munge_decode(cred, ctx, nullptr, nullptr, nullptr, nullptr);
    std::free(cred);
    if (e == EMUNGE_SUCCESS) {
      r->Ok("munge", "munged at " + sock + " encodes and decodes a credential");
    } else {
      r->Fail("munge",
              std::string("munged encodes but cannot decode its own credential: ") +
                  munge_ctx_strerror(ctx),
              "check /etc/munge/munge.key (the same on every node, owned by munge, mode 0400) "
              "and the clock (NTP), then restart munged: systemctl restart munge");
    }
  } else if (e == EMUNGE_SOCKET && !Exists(sock)) {
    r->Fail("munge", "munged is not running (no socket at " + sock + ")",
            "start it: systemctl start munge");
  } else if (e == EMUNGE_SOCKET) {
    r->Fail("munge", "cannot talk to munged at " + sock + ": " + munge_ctx_strerror(ctx),
            "check that munged runs (systemctl status munge) and that its socket is "
            "reachable by every user");
  } else {
    r->Fail("munge", std::string("munged refuses a credential: ") + munge_ctx_strerror(ctx),
            "see munged's log (journalctl -u munge)");
  }
  munge_ctx_destroy(ctx);
}

// ---- PMIx ---------------------------------------------------------------------------------

void CheckPmix(const std::string& srun, Report* r) {
  // The agent's libpmix: the one it was linked with, by its rpath (FANSTORE_PMIX_LIBDIR).
  const std::string lib = std::string(FANSTORE_PMIX_LIBDIR) + "/libpmix.so.2";
  void* h = ::dlopen(lib.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!h) h = ::dlopen("libpmix.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    r->Fail("pmix", std::string("libpmix.so.2 does not load: ") + ::dlerror(),
            "install PMIx (Debian: apt-get install libpmix2)");
  } else {
    using GetVersion = const char* (*)();
    auto get = reinterpret_cast<GetVersion>(::dlsym(h, "PMIx_Get_version"));
    const std::string have = get ? get() : "unknown";
    const std::string built = FANSTORE_PMIX_VERSION;
    // "OpenPMIx 4.2.2rc2, repo rev: ..." against pkg-config's "4.2.2rc2": major.minor must match.
    const std::string major_minor = built.substr(0, built.find('.', built.find('.') + 1));
    if (have.find(" " + major_minor + ".") == std::string::npos)
      r->Fail("pmix", "libpmix is " + have + ", the agent was built against PMIx " + built,
              "install PMIx " + major_minor + ", or rebuild FanStore against this PMIx");
    else
      r->Ok("pmix", have.substr(0, have.find_first_of(",(")) +
                        " (the agent was built against PMIx " + built + ")");
  }
  if (!Exists(srun)) {
    r->Warn("slurm-mpi", "srun is not at " + srun + ": cannot list Slurm's MPI plugins",
            "run fanstore doctor where srun is installed, or give srun= on the plugin line");
    return;
  }
  auto out = Output({srun, "--mpi=list"});
  if (!out) {
    r->Warn("slurm-mpi", "cannot run " + srun + " --mpi=list", "check that srun works");
  } else if (out->find("pmix") == std::string::npos) {
    r->Fail("slurm-mpi",
            "Slurm has no pmix MPI plugin (" + srun +
                " --mpi=list): the agents start"
                " with --mpi=pmix",
            "install Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins, mpi_pmix.so)");
  } else {
    r->Ok("slurm-mpi", "Slurm's MPI plugins include pmix");
  }
}

// ---- the local directory -------------------------------------------------------------------

const char* NetworkFsName(long type) {
  switch (static_cast<unsigned long>(type)) {
    case 0x6969:
      return "NFS";
    case 0x0BD00BD0:
      return "Lustre";
    case 0x47504653:
      return "GPFS";
    case 0xFF534D42:
      return "CIFS";
    case 0xFE534D42:
      return "SMB2";
    case 0x19830326:
      return "BeeGFS";
    case 0x00C36400:
      return "CephFS";
    case 0x65735546:
      return "FUSE";
    default:
      return nullptr;
  }
}

// The part of the local_dir= template that exists before a job, expanded as the plugin does for
// this user on this node; nothing after a FAIL when the node has no name the plugin can use.
std::optional<std::string> ExpandLocalDir(const std::string& tmpl, Report* r) {
  spank::JobIdentity id;
  id.uid = ::getuid();
  const Result<std::string> user = spank::UserName(id.uid);
  id.user = user.ok() ? user.value() : std::to_string(id.uid);
  const Result<std::string> node = spank::NodeName();
  if (!node.ok()) {
    r->Fail("local-dir", node.status().message() + ": the plugin fails every job on this node",
            "give the node a name without '/' (slurm.conf NodeName=)");
    return std::nullopt;
  }
  id.node = node.value();
  spank::Config resolved;  // as the plugin reads it on this node: the fixed part's links resolved
  resolved.local_dir = tmpl;
  spank::ResolveAdminSymlinks(&resolved);
  return spank::ExpandTemplate(spank::TemplateBeforeJob(resolved.local_dir), id);
}

// The file system of the local directory (or of its nearest ancestor, `probe_dir`): node-local,
// its free space and inodes. False when it cannot be told.
bool CheckLocalFs(const std::string& probe_dir, const std::string& tmpl, Report* r) {
  struct statfs fs;
  if (::statfs(probe_dir.c_str(), &fs) != 0) {
    r->Warn("local-fs", "cannot statfs " + probe_dir + ": " + std::strerror(errno), "check it");
    return false;
  }
  if (const char* net = NetworkFsName(fs.f_type); net && tmpl.find("%n") == std::string::npos)
    r->Warn("local-fs",
            probe_dir + " is on " + std::string(net) +
                ", a shared file system: staging there adds to its load instead of "
                "taking the load off",
            "point local_dir= at a node-local disk (or put %n in it)");
  else
    r->Ok("local-fs", probe_dir + " is on a node-local file system" +
                          std::string(fs.f_type == 0x01021994 ? " (tmpfs: the staged data uses "
                                                                "the node's memory)"
                                                              : ""));
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_bsize;
  const uint64_t free_inodes = fs.f_ffree;
  const bool inodes_counted = fs.f_files != 0;  // some file systems report none
  const std::string figures = probe_dir + " has " + HumanBytes(free_bytes) + " free and " +
                              (inodes_counted ? std::to_string(free_inodes) : "unlimited") +
                              " free inodes";
  if (free_bytes == 0 || (inodes_counted && free_inodes == 0))
    r->Fail("local-space", figures + ": it is full, stage-in fails",
            "free space in " + probe_dir + " or point local_dir= at a larger disk");
  else if (free_bytes < kLowSpace || (inodes_counted && free_inodes < kLowInodes))
    r->Warn("local-space",
            figures + ", under " + HumanBytes(kLowSpace) + " or " + std::to_string(kLowInodes) +
                " inodes: a node holds its share of a"
                " dataset there",
            "free space in " + probe_dir + ", or point local_dir= at a larger disk");
  else
    r->Ok("local-space", figures);
  return true;
}

// The local directory, expanded, when it is one that jobs can use.
std::optional<std::string> CheckLocalDir(const std::string& tmpl, Report* r) {
  const std::optional<std::string> expanded = ExpandLocalDir(tmpl, r);
  if (!expanded) return std::nullopt;
  const std::string& dir = *expanded;
  const bool per_job = spank::TemplateBeforeJob(tmpl) != tmpl;
  const std::string name = dir == tmpl ? dir : dir + " (from " + tmpl + ")";
  struct stat st;
  bool usable = false;
  std::string probe_dir = dir;  // the directory whose file system is measured
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    while (probe_dir != "/" && !Exists(probe_dir)) probe_dir = Dirname(probe_dir);
    r->Fail("local-dir",
            "the local directory " + name +
                " does not exist (the plugin creates only"
                " fanstore.UID.JOB inside it)",
            "create it on every node: mkdir -p " + dir + " && chmod 1777 " + dir);
  } else if (auto trusted = OpenTrustedDir(dir, ::getuid() == 0 ? st.st_uid : ::getuid(), true);
             !trusted.ok()) {
    // What the prolog and the agent check on the way to a job's directory (docs/security.md).
    r->Fail("local-dir",
            "jobs refuse the local directory " + name + ": " + trusted.status().message(),
            "give local_dir= the real path, owned by root (chmod 1777 for a shared one)");
  } else {
    // A real write: permissions, a read-only mount, a full inode table all show here.
    std::string tmp = dir + "/.fanstore-doctor.XXXXXX";
    UniqueFD fd(::mkstemp(tmp.data()));
    if (!fd.valid()) {
      const int err = errno;
      r->Fail("local-dir",
              "cannot create a file in the local directory " + name + ": " + std::strerror(err),
              err == EROFS ? "mount it read-write"
                           : "make it writable by the job's user (chmod 1777 " + dir + ")");
    } else if (::unlink(tmp.c_str()) == 0 && ::getuid() == 0 && st.st_uid != 0 &&
               (st.st_mode & 0002) == 0) {
      // The prolog makes the job's directory only in a root-owned one; elsewhere the job's user
      // must be able to write (root always can, so its write above proves nothing for users).
      r->Warn("local-dir",
              "the local directory " + name + " belongs to uid " + std::to_string(st.st_uid) +
                  " and others cannot write to it: jobs of other users fail there",
              "chown root " + dir + ", or chmod 1777 " + dir);
    } else {
      usable = true;
      r->Ok("local-dir",
            "the local directory " + name + " is writable" +
                (per_job ? " (each job's directory under it is made at job start)" : ""));
    }
  }
  if (!CheckLocalFs(probe_dir, tmpl, r)) return std::nullopt;
  return usable ? std::optional<std::string>(dir) : std::nullopt;
}

// ---- kernel features and limits -------------------------------------------------------------

void CheckKernel(const spank::Config& ps, Report* r) {
  const std::string lost =
      ": tasks get no kernel-visible view (static binaries, exec and dlopen of dataset files, "
      "containers); the interception library still serves them";
  struct stat st;
  if (!ps.kernel_view)
    r->Ok("fuse", "the kernel-visible view is turned off (kernel_view=no)");
  else if (::stat("/dev/fuse", &st) != 0)
    r->Warn("fuse", "/dev/fuse does not exist" + lost, "load the fuse module: modprobe fuse");
  else if ((st.st_mode & 0006) != 0006)
    r->Warn("fuse",
            "/dev/fuse is not usable by users (mode 0" + std::to_string((st.st_mode >> 6) & 7) +
                std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
                "): Slurm jobs are fine (the plugin opens it as root), but `fanstore run "
                "--kernel-view` without root is not",
            "chmod 0666 /dev/fuse (Debian's default)");
  else
    r->Ok("fuse", "/dev/fuse exists and is usable by users");
  // The view's mount point: the prefix must be an empty directory (a tmpfs goes over it in each
  // task's namespace), unless every job names an existing directory with --fanstore-mount.
  if (ps.kernel_view) {
    const std::string& mp = ps.mount_prefix;
    auto empty = [&]() {
      DIR* d = ::opendir(mp.c_str());
      if (!d) return false;
      int n = 0;
      while (struct dirent* de = ::readdir(d))
        n += std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0;
      ::closedir(d);
      return n == 0;
    };
    if (::lstat(mp.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      r->Warn("mount-prefix", mp + " is not a directory" + lost + " at " + mp + "/NAME",
              "mkdir -m 0755 " + mp + " (the fanstore-spank package creates /fanstore)");
    else if (st.st_uid != 0 || (st.st_mode & 022))
      r->Warn("mount-prefix", mp + " is not root's, or others can write it" + lost,
              "chown root: " + mp + " && chmod 0755 " + mp);
    else if (!empty())
      r->Warn("mount-prefix", mp + " is not empty" + lost + " at " + mp + "/NAME",
              "point mount_prefix= at an empty directory");
    else
      r->Ok("mount-prefix", mp + " is an empty directory: each task's view is mounted under it");
  }
  const std::string why =
      " (only needed by `fanstore run --kernel-view` without root, and by rootless containers)";
  auto read_int = [](const char* path) -> std::optional<int64_t> {
    auto t = ReadSmallFile(path, 64);
    if (!t.ok()) return std::nullopt;
    std::string s = *t;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return ParseInt(s, 0, INT64_MAX);
  };
  const auto clone = read_int("/proc/sys/kernel/unprivileged_userns_clone");
  const auto max_ns = read_int("/proc/sys/user/max_user_namespaces");
  const auto apparmor = read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  if (clone && *clone == 0)
    r->Warn("userns", "unprivileged user namespaces are off" + why,
            "sysctl kernel.unprivileged_userns_clone=1");
  else if (max_ns && *max_ns == 0)
    r->Warn("userns", "user namespaces are off (user.max_user_namespaces=0)" + why,
            "sysctl user.max_user_namespaces=15000");
  else if (apparmor && *apparmor == 1)
    r->Warn("userns", "AppArmor restricts unprivileged user namespaces" + why,
            "sysctl kernel.apparmor_restrict_unprivileged_userns=0");
  else
    r->Ok("userns", "unprivileged user namespaces are allowed");
}

std::string Limit(rlim_t v) {
  return v == RLIM_INFINITY ? "unlimited" : std::to_string(static_cast<uint64_t>(v));
}

void CheckLimits(Report* r) {
  const std::string whose =
      ::getuid() == 0 ? " (root's; a job gets its submitting shell's, unless slurm.conf's "
                        "PropagateResourceLimits says otherwise: run fanstore doctor as a user too)"
                      : " (a job gets these, from the shell that submits it, unless slurm.conf's "
                        "PropagateResourceLimits says otherwise)";
  struct rlimit rl;
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const std::string nofile =
      "open files: soft " + Limit(rl.rlim_cur) + ", hard " + Limit(rl.rlim_max) + whose;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < kLowNofile)
    r->Warn("nofile",
            nofile + "; under " + std::to_string(kLowNofile) +
                ", a task opening many dataset files at once may run out",
            "raise nofile in /etc/security/limits.conf (and LimitNOFILE= of slurmd.service) to "
            "65536 or more");
  else
    r->Ok("nofile", nofile);
  ::getrlimit(RLIMIT_MEMLOCK, &rl);
  r->Ok("memlock", "locked memory: soft " +
                       (rl.rlim_cur == RLIM_INFINITY ? "unlimited" : HumanBytes(rl.rlim_cur)) +
                       ", hard " +
                       (rl.rlim_max == RLIM_INFINITY ? "unlimited" : HumanBytes(rl.rlim_max)));
}

}  // namespace
}  // namespace fanstore::cli::doctor

namespace fanstore::cli {

int CmdDoctor(int argc, char** argv) {
  CLI::App app(
      "Checks that this node can run FanStore jobs: the SPANK plugin, MUNGE, PMIx, the local "
      "directory and the read path a job gets there, /dev/fuse and namespaces, and the limits. "
      "Each check prints one line: ok, warn "
      "or FAIL, and for a problem what is wrong and what to do. Run it as root and as a user.",
      "fanstore doctor");
  Configure(app);
  app.footer("Exit status: 0 when no check FAILs, 1 otherwise, 2 usage error.");
  doctor::Options o;
  app.add_option("--plugstack", o.plugstack,
                 "Slurm's plugstack.conf; the files it includes are read too")
      ->type_name("FILE")
      ->default_str(o.plugstack);
  app.add_option("--local-dir", o.local_dir,
                 "the local directory to check, a local_dir= template (default: the plugin's "
                 "local_dir=, else /tmp)")
      ->type_name("DIR");
  app.add_option("--munge-socket", o.munge_socket, "munged's socket (default: libmunge's)")
      ->type_name("PATH");
  app.add_flag("--json", o.json, "print the checks as a JSON array, one object per check");
  app.add_flag("-q,--quiet", o.quiet, "print only the checks that warn or FAIL");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  doctor::Report r;
  spank::Config settings = spank::DefaultConfig();  // the plugin's line's, once it parses
  doctor::CheckPlugin(o.plugstack, &r, &settings);
  doctor::CheckMunge(o, &r);
  doctor::CheckPmix(settings.srun, &r);
  const auto local =
      doctor::CheckLocalDir(o.local_dir.empty() ? settings.local_dir : o.local_dir, &r);
  if (local) doctor::CheckReadPath(*local, settings.image, &r);
  doctor::CheckKernel(settings, &r);
  doctor::CheckLimits(&r);
  r.Print(o.json, o.quiet);
  return r.Failed() ? kExitBad : kExitOk;
}

}  // namespace fanstore::cli
