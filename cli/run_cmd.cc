// `fanstore run DS.fs [OPTIONS] -- COMMAND...`: serve a dataset on this
// machine without Slurm: start an agent, wait until it is ready, run COMMAND with the
// interception library, return COMMAND's exit status, and tear everything down whatever
// happens to COMMAND.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/io.h"
#include "common/mountinfo.h"
#include "common/path.h"
#include "common/remove_tree.h"
#include "common/run_dir.h"
#include "common/task_views.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"
#include "format/manifest.h"
#include "output/drainer.h"
#include "spank-plugin/config.h"
#include "spank-plugin/job.h"

extern char** environ;

namespace fanstore::cli {
namespace {

// The first existing candidate, or the last one (for the error message).
std::string Locate(const char* env_name, const std::vector<std::string>& candidates) {
  if (const char* e = std::getenv(env_name)) return e;
  for (const auto& c : candidates)
    if (::access(c.c_str(), R_OK) == 0) return c;
  return candidates.back();
}

// The plugin's default: <mount_prefix>/NAME, NAME the dataset directory's name without .fs.
Result<std::string> DefaultMount(const std::string& dataset) {
  spank::UserOptions opts;
  opts.dataset = TrimTrailingSlashes(dataset);
  auto mount = spank::ResolveMount(opts, spank::DefaultConfig());
  if (!mount.ok())
    return Status::InvalidArgument("cannot derive a mount name from " + dataset + "; use --mount");
  return mount;
}

bool Exited(pid_t pid, int* wstatus) { return ::waitpid(pid, wstatus, WNOHANG) == pid; }

constexpr double kMaxTimeoutSeconds = 365 * 86400;

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

// Each run keeps a lock on <run dir>/launcher (which names its local directory) for as long as
// it lives. A run and agent killed with SIGKILL cannot clean up; the next run finds their
// directories by that lock being free, and removes them (F15).
constexpr char kLauncherName[] = "launcher";

Result<UniqueFD> HoldLauncher(const std::string& run_dir, const std::string& local_dir) {
  const std::string path = run_dir + "/" + kLauncherName;
  UniqueFD fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno("create " + path, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return Status::FromErrno("lock " + path, errno);
  FS_RETURN_IF_ERROR(WriteFull(fd.get(), local_dir.data(), local_dir.size(), path));
  return fd;
}

// Removes what killed runs of this user left in `parent` (run directories named `prefix`...).
void RemoveLeftovers(const std::string& parent, const std::string& prefix) {
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string run_dir = parent + "/" + name;
    UniqueFD dir(::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!dir.valid() || ::fstat(dir.get(), &st) != 0 || st.st_uid != ::getuid()) continue;
    // No launcher file yet: a run that is just starting. Its lock held: a live run.
    UniqueFD launcher(::openat(dir.get(), kLauncherName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!launcher.valid() || ::flock(launcher.get(), LOCK_EX | LOCK_NB) != 0) continue;
    // A run killed while its output drained: its agent goes on until the drain ends.
    if (run_dir::AgentAlive(run_dir)) continue;
    char buf[PATH_MAX] = {};
    const ssize_t n = ::read(launcher.get(), buf, sizeof buf - 1);
    const std::string local_dir = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    // Only a local directory of ours, named as runs name them.
    struct stat ls;
    if (local_dir.find("/fanstore-local.") != std::string::npos &&
        ::lstat(local_dir.c_str(), &ls) == 0 && S_ISDIR(ls.st_mode) && ls.st_uid == ::getuid()) {
      (void)DetachMountsBelow(local_dir, "erofs");  // a killed agent's image (root only)
      (void)RemoveTree(local_dir);
    }
    (void)RemoveTree(run_dir);
    std::fprintf(stderr, "fanstore: run: removed what a killed run left: %s%s%s\n", run_dir.c_str(),
                 local_dir.empty() ? "" : ", ", local_dir.c_str());
  }
}

struct RunOptions {
  std::string ds;  // absolute; empty: no dataset (an output-only run)
  std::string mount, local_parent, unpack = "auto", image = "auto";
  std::string output;  // --output: the directory on the parallel file system
  double drain_timeout = 300;
  double timeout = 0;  // seconds; 0: no limit
  bool verbose = false;
  bool kernel_view = false;
  char** command = nullptr;  // COMMAND [ARGS...], null-terminated
};

// The defaults and absolute forms of what was given; why they cannot be had, or "".
std::string CompleteRunOptions(RunOptions* o) {
  if (!o->output.empty()) o->output = TrimTrailingSlashes(Absolute(o->output));
  if (!o->ds.empty()) o->ds = Absolute(o->ds);
  if (o->mount.empty() && !o->ds.empty()) {
    auto mount = DefaultMount(o->ds);
    if (!mount.ok()) return mount.status().message();
    o->mount = mount.value();
  }
  if (o->local_parent.empty()) {
    const char* t = std::getenv(env::kTmpdir);
    o->local_parent = t && *t ? t : "/tmp";
  }
  // Its symlinks resolved (a /home that links to /gpfs/home): the job's directories below it
  // are then reached without following any (common/private_dir.h).
  char real[PATH_MAX];
  if (::realpath(o->local_parent.c_str(), real) != nullptr) o->local_parent = real;
  return "";
}

// Options end at "--"; COMMAND follows. Returns -1 to go on, else the exit status.
int ParseRunOptions(int argc, char** argv, RunOptions* o) {
  CLI::App app(
      "Serves the dataset DS.fs on this machine without Slurm: starts an agent that stages the\n"
      "dataset into a private directory under DIR, waits until it is ready, runs COMMAND with the\n"
      "interception library so that the dataset appears read-only at PATH, and removes\n"
      "everything when COMMAND ends, also when it fails or is killed. With --output, COMMAND\n"
      "also gets $FANSTORE_OUTPUT, drained to DIR; DS.fs is then optional.",
      "fanstore run");
  Configure(app, " -- COMMAND [ARGS...]");
  app.footer(
      "Environment: FANSTORE_AGENT and FANSTORE_PRELOAD override where the agent binary and the\n"
      "interception library are looked up (default: next to this program, then the install\n"
      "directories).\n"
      "\n"
      "Exit status: COMMAND's (128+N when it died of signal N), or 1 when the dataset cannot be\n"
      "served (COMMAND is then not started), 2 usage error.");
  app.add_option("DS.fs", o->ds, "the dataset to serve (optional with --output)");
  app.add_option(
         "--output", o->output,
         "a directory on the parallel file system: COMMAND writes its output (checkpoints,\n"
         "logs) to $FANSTORE_OUTPUT on local storage, and each file, once closed or\n"
         "renamed into place, is copied there in the background, verified, and renamed\n"
         "into place, never half-written; a manifest .fanstore-output.json lists them")
      ->type_name("DIR");
  app.add_option("--drain-timeout", o->drain_timeout,
                 "when COMMAND ends, wait this long at most for the output to drain (default\n"
                 "300); what did not is named and stays in the local directory")
      ->type_name("SEC")
      ->check(args::Seconds(kMaxTimeoutSeconds));
  app.add_option("--mount", o->mount,
                 "virtual path of the dataset (default /fanstore/NAME, NAME being the\n"
                 "dataset directory's name without .fs)")
      ->type_name("PATH")
      ->transform(CLI::Validator(
          [](std::string& m) -> std::string {
            m = TrimTrailingSlashes(m);
            return IsCleanAbsolutePath(m)
                       ? ""
                       : "must be a clean absolute path other than / (no '.', '..' or '//')";
          },
          ""));
  app.add_option("--local-dir", o->local_parent,
                 "where the staged copy goes (default $TMPDIR, else /tmp)")
      ->type_name("DIR");
  app.add_option("--timeout", o->timeout, "give up when stage-in takes longer (default: no limit)")
      ->type_name("SEC")
      ->check(args::Seconds(kMaxTimeoutSeconds));
  app.add_option("--image", o->image,
                 "auto (default), yes or no: stage the dataset as one read-only EROFS\n"
                 "image mounted under the local directory instead of a file per dataset\n"
                 "file (as root, on a disk-backed local directory; see fanstore-agent --help)")
      ->type_name("MODE")
      ->check(args::OneOf({"auto", "yes", "no"}));
  app.add_option("--unpack", o->unpack,
                 "auto (default), eager or lazy: when the files are unpacked, see\n"
                 "fanstore-agent --help")
      ->type_name("MODE")
      ->check(args::OneOf(kUnpackModes));
  app.add_flag("--kernel-view", o->kernel_view,
               "also mount the dataset at PATH for the kernel (FUSE), in COMMAND's own mount\n"
               "namespace, so that static binaries, exec and dlopen see it too. As root, or\n"
               "else in a user namespace of COMMAND's own (its supplementary groups then show\n"
               "as nogroup); needs /dev/fuse. PATH must exist, or its deepest existing parent\n"
               "be an empty directory. Says why, and runs COMMAND without it, when it cannot\n"
               "be made; COMMAND finds FANSTORE_KERNEL_VIEW=on or off: WHY");
  app.add_flag("-v,--verbose", o->verbose,
               "show the agent's progress and statistics (default: only errors)");
  int dashdash = 1;
  while (dashdash < argc && std::strcmp(argv[dashdash], "--") != 0) dashdash++;
  if (int rc = args::Parse(app, dashdash, argv); rc >= 0) return rc;
  if (dashdash + 1 >= argc)
    return args::UsageError(app, "-- COMMAND is missing: run needs a command to run");
  o->command = argv + dashdash + 1;
  if (o->ds.empty() && o->output.empty())
    return args::UsageError(app, "give DS.fs, --output DIR, or both");
  if (std::string why = CompleteRunOptions(o); !why.empty()) return args::UsageError(app, why);
  return -1;
}

// The agent binary and the interception library; false (after a message) when one is missing.
bool FindTools(std::string* agent, std::string* preload) {
  const std::string self = SelfDir();
  *agent =
      Locate(env::kRunAgent, {self + "/fanstore-agent", FANSTORE_INSTALL_BINDIR "/fanstore-agent"});
  *preload = Locate(env::kRunPreload, {self + "/../lib/libfanstore_preload.so",
                                       FANSTORE_INSTALL_LIBDIR "/libfanstore_preload.so"});
  if (::access(agent->c_str(), X_OK) != 0) {
    std::fprintf(stderr, "fanstore: run: agent %s not found (set %s)\n", agent->c_str(),
                 env::kRunAgent);
    return false;
  }
  if (::access(preload->c_str(), R_OK) != 0) {
    std::fprintf(stderr, "fanstore: run: interception library %s not found (set %s)\n",
                 preload->c_str(), env::kRunPreload);
    return false;
  }
  return true;
}

// Writes `text` to a /proc/self file (a user namespace's maps).
Status WriteProcSelf(const char* name, const std::string& text) {
  const std::string path = std::string("/proc/self/") + name;
  UniqueFD fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);
  return WriteFull(fd.get(), text.data(), text.size(), path);
}

// In COMMAND's process before exec (one thread): a mount namespace of its own (and, without
// root, a user namespace in which the user keeps their ids), in which the staged copy is
// read-only and the FUSE mount at `mount` is handed to the agent: COMMAND's view is a Slurm
// task's.
Status KernelViewForCommand(const std::string& mount, const std::string& local_dir,
                            const std::string& socket) {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::geteuid() == 0) {
    FS_RETURN_IF_ERROR(PrivateMountNamespace());
  } else {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return Status::FromErrno("unshare(CLONE_NEWUSER | CLONE_NEWNS)", errno);
    FS_RETURN_IF_ERROR(WriteProcSelf("setgroups", "deny"));
    FS_RETURN_IF_ERROR(
        WriteProcSelf("uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1"));
    FS_RETURN_IF_ERROR(
        WriteProcSelf("gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"));
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
      return Status::FromErrno("make / a slave mount", errno);
  }
  FS_RETURN_IF_ERROR(ReadOnlyView(local_dir, uid));
  // The agent mounted the whole dataset as an EROFS image (`fanstore run` is one agent, which
  // holds every shard): the kernel serves the view from it, no FUSE.
  auto status = run_dir::ReadStatus(socket.substr(0, socket.rfind('/')));
  if (::geteuid() == 0 && status.ok() && status->image && status->whole)
    return BindKernelView(mount, local_dir + "/data");
  auto dev = MountKernelView(mount, uid, gid);
  if (!dev.ok()) return dev.status();
  return HandOverView(socket, dev->get());
}

// One run: its private directories, its agent and its command.
class Run {
 public:
  explicit Run(const RunOptions& o) : o_(o) {}
  ~Run() { (void)Teardown(); }

  // Private directories: the run directory in shared memory, the data and the output on local
  // storage.
  bool MakeDirs();
  // Starts the agent and waits until it is ready. Returns -1 then, else the exit status.
  int StartAgent(const std::string& agent);
  // Runs COMMAND against the dataset (if any), with its output directory (if any), and returns
  // its exit status.
  int RunCommand(const std::string& preload);
  // Stops the agent, which waits for the output to drain (up to --drain-timeout), then removes
  // what it made. False when some output did not drain (the agent named it).
  bool Teardown();

 private:
  int WaitReady();
  std::string AgentDeath(int ws) const;

  const RunOptions& o_;
  std::string run_dir_, local_dir_, output_dir_;
  UniqueFD launcher_;
  pid_t agent_pid_ = -1;
};

bool Run::MakeDirs() {
  const std::string run_prefix = "fanstore." + std::to_string(::getuid()) + ".run.";
  std::string run_tmpl = "/dev/shm/" + run_prefix + "XXXXXX";
  if (::access("/dev/shm", W_OK) != 0) run_tmpl = o_.local_parent + "/" + run_prefix + "XXXXXX";
  RemoveLeftovers(run_tmpl.substr(0, run_tmpl.rfind('/')), run_prefix);
  std::string local_tmpl = Absolute(o_.local_parent) + "/fanstore-local.XXXXXX";
  if (!::mkdtemp(run_tmpl.data())) {
    std::fprintf(stderr, "fanstore: run: cannot create a run directory: %s\n",
                 std::strerror(errno));
    return false;
  }
  run_dir_ = run_tmpl;
  // The output's directory is the agent's to remove (once everything in it drained), never a
  // later run's: what did not drain stays there.
  for (auto [dir, tmpl, wanted] :
       {std::tuple{&local_dir_, local_tmpl, !o_.ds.empty()},
        std::tuple{&output_dir_, Absolute(o_.local_parent) + "/fanstore-output.XXXXXX",
                   !o_.output.empty()}}) {
    if (!wanted) continue;
    if (!::mkdtemp(tmpl.data())) {
      std::fprintf(stderr, "fanstore: run: cannot create a directory in %s: %s\n",
                   o_.local_parent.c_str(), std::strerror(errno));
      return false;
    }
    *dir = tmpl;
  }
  auto launcher = HoldLauncher(run_dir_, local_dir_);
  if (!launcher.ok()) {
    std::fprintf(stderr, "fanstore: run: %s\n", launcher.status().ToString().c_str());
    return false;
  }
  launcher_ = std::move(*launcher);
  return true;
}

int Run::StartAgent(const std::string& agent) {
  const pid_t launcher = ::getpid();
  agent_pid_ = ::fork();
  if (agent_pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);         // never outlive `fanstore run`
    if (::getppid() != launcher) ::_exit(127);  // it died before the line above took effect
    ::unsetenv(env::kLdPreload);
    ::setenv(env::kDisable, "1", 1);
    const std::string drain = std::to_string(o_.drain_timeout);
    std::vector<const char*> av = {agent.c_str()};
    if (!o_.ds.empty())  // first, as ever: `pgrep -f "fanstore-agent --dataset DS"` finds it
      av.insert(av.end(),
                {"--dataset", o_.ds.c_str(), "--local-dir", local_dir_.c_str(), "--mount",
                 o_.mount.c_str(), "--unpack", o_.unpack.c_str(), "--image", o_.image.c_str()});
    // The agent stops at once and this process removes the staged files (Teardown): one
    // remover, whether the agent stopped or was killed, and no stop deadline spent unlinking.
    av.insert(av.end(),
              {"--run-dir", run_dir_.c_str(), "--bootstrap", "single", "--leave-local-dir"});
    if (!o_.output.empty())
      av.insert(av.end(), {"--output", o_.output.c_str(), "--output-dir", output_dir_.c_str(),
                           "--drain-timeout", drain.c_str()});
    av.push_back(o_.verbose ? "--verbose" : "--quiet");
    av.push_back(nullptr);
    ::execv(agent.c_str(), const_cast<char* const*>(av.data()));
    std::fprintf(stderr, "fanstore: run: cannot start %s: %s\n", agent.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  if (agent_pid_ < 0) {
    std::fprintf(stderr, "fanstore: run: cannot start the agent: fork: %s\n", std::strerror(errno));
    return kExitBad;
  }
  return WaitReady();
}

// Died without a word (SIGKILL, the OOM killer, a crash): says how.
std::string Run::AgentDeath(int ws) const {
  if (WIFSIGNALED(ws))
    return "the agent was killed by signal " + std::to_string(WTERMSIG(ws)) + " (" +
           strsignal(WTERMSIG(ws)) + ") during stage-in";
  if (WIFEXITED(ws))
    return "the agent exited with status " + std::to_string(WEXITSTATUS(ws)) + " during stage-in";
  return "";
}

// Waits for readiness, or failure, or the agent's death, or a signal, or the timeout.
int Run::WaitReady() {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    auto st = run_dir::ReadStatus(run_dir_);  // an error: not written yet
    if (st.ok() && st->state == run_dir::AgentState::kReady) return -1;
    int ws;
    const bool failed = st.ok() && st->state == run_dir::AgentState::kFailed;
    if (failed || Exited(agent_pid_, &ws)) {
      std::string error = failed ? st->error : "";
      if (!failed) {
        agent_pid_ = -1;
        // Its last word, written before it died, else how it died.
        if (st.ok() && !st->error.empty()) error = st->error;
        if (error.empty()) error = AgentDeath(ws);
      }
      std::fprintf(stderr, "fanstore: run: the agent could not %s%s%s\n",
                   o_.ds.empty() ? "start" : ("serve " + o_.ds).c_str(), error.empty() ? "" : ": ",
                   error.c_str());
      return kExitBad;
    }
    if (g_signal) {
      std::fprintf(stderr, "fanstore: run: interrupted during stage-in\n");
      return 128 + g_signal;
    }
    if (o_.timeout > 0 && SecondsSince(start) > o_.timeout) {
      std::fprintf(stderr, "fanstore: run: stage-in did not finish within %g s\n", o_.timeout);
      return kExitBad;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int Run::RunCommand(const std::string& preload) {
  pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, SIG_DFL);
    if (!output_dir_.empty()) ::setenv(env::kOutput, output_dir_.c_str(), 1);
    ::setenv(env::kSocket, (run_dir_ + "/" + run_dir::kSocketName).c_str(), 1);  // fanstore stats
    if (o_.ds.empty()) {  // output only: nothing to serve
      ::execvp(o_.command[0], o_.command);
      std::fprintf(stderr, "fanstore: run: cannot run %s: %s\n", o_.command[0],
                   std::strerror(errno));
      ::_exit(127);
    }
    // After what is already preloaded: a sanitizer runtime must stay first.
    const char* old = std::getenv(env::kLdPreload);
    std::string lp = old && *old ? std::string(old) + ":" + preload : preload;
    ::setenv(env::kLdPreload, lp.c_str(), 1);
    ::setenv(env::kMount, o_.mount.c_str(), 1);
    ::setenv(env::kTable, (run_dir_ + "/" + run_dir::kTableName).c_str(), 1);
    ::unsetenv(env::kDisable);
    if (o_.kernel_view) {
      Status st = KernelViewForCommand(o_.mount, local_dir_, run_dir_ + "/" + run_dir::kSocketName);
      if (!st.ok())
        std::fprintf(stderr, "fanstore: run: no kernel-visible view at %s: %s\n", o_.mount.c_str(),
                     st.message().c_str());
      ::setenv(env::kKernelView, st.ok() ? "on" : ("off: " + st.message()).c_str(), 1);
    }
    ::execvp(o_.command[0], o_.command);
    std::fprintf(stderr, "fanstore: run: cannot run %s: %s\n", o_.command[0], std::strerror(errno));
    ::_exit(127);
  }
  if (child < 0) {  // never signal -(-1): that would reach every process of the user
    std::fprintf(stderr, "fanstore: run: cannot start %s: fork: %s\n", o_.command[0],
                 std::strerror(errno));
    return kExitBad;
  }
  // Keep the terminal's job control simple: the command runs in its own process group and
  // gets our signals forwarded.
  ::setpgid(child, child);
  int ws = 0;
  int forwarded = 0;
  while (true) {
    pid_t r = ::waitpid(child, &ws, 0);
    if (r == child) break;
    if (r < 0 && errno != EINTR) break;
    if (g_signal && g_signal != forwarded) {
      forwarded = g_signal;
      ::kill(-child, g_signal);
    }
  }
  if (WIFEXITED(ws)) return WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) return 128 + WTERMSIG(ws);
  return kExitBad;
}

bool Run::Teardown() {
  int ws = 0;
  bool exited = false;
  if (agent_pid_ > 0 && !(exited = Exited(agent_pid_, &ws))) {
    ::kill(agent_pid_, SIGTERM);
    // 5 s for the agent to stop, and the drain's bound with what may follow it.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5) +
        std::chrono::milliseconds(static_cast<int64_t>(
            o_.output.empty() ? 0 : o_.drain_timeout * 1000 + output::kFinishSlackMs));
    while (!(exited = Exited(agent_pid_, &ws)) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    if (!exited) {
      std::fprintf(stderr, "fanstore: run: the agent did not stop; killed\n");
      ::kill(agent_pid_, SIGKILL);
      ::waitpid(agent_pid_, &ws, 0);
    }
  }
  agent_pid_ = -1;
  if (!local_dir_.empty()) {
    (void)DetachMountsBelow(local_dir_, "erofs");  // when the agent was killed with its image
    (void)RemoveTree(local_dir_, ThreadPool::DefaultThreads());  // a million files: every core
  }
  if (!run_dir_.empty()) (void)RemoveTree(run_dir_);
  local_dir_.clear();
  run_dir_.clear();
  return o_.output.empty() || (exited && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

}  // namespace

int CmdRun(int argc, char** argv) {
  RunOptions o;
  if (int rc = ParseRunOptions(argc, argv, &o); rc >= 0) return rc;
  std::string agent, preload;
  if (!o.ds.empty()) {
    // Check the dataset before starting anything, for a clear message.
    auto m = format::LoadManifest(o.ds);
    if (!m.ok()) {
      std::fprintf(stderr, "fanstore: run: %s\n", m.status().ToString().c_str());
      return kExitBad;
    }
  }
  if (!FindTools(&agent, &preload)) return kExitBad;
  Run run(o);
  if (!run.MakeDirs()) return kExitBad;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
  if (int rc = run.StartAgent(agent); rc >= 0) return rc;
  const int rc = run.RunCommand(preload);
  // The command's status, unless its output did not all reach the parallel file system.
  if (!run.Teardown() && rc == 0) return kExitBad;
  return rc;
}

}  // namespace fanstore::cli
