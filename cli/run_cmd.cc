// `fanstore run DS.fs [--mount M] [--local-dir DIR] -- COMMAND...`: serve a dataset on this
// machine without Slurm: start an agent, wait until it is ready, run COMMAND with the
// interception library, return COMMAND's exit status, and tear everything down whatever
// happens to COMMAND.
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/run_dir.h"
#include "common/unique_fd.h"
#include "cli/cli.h"
#include "common/io.h"
#include "format/manifest.h"

extern char** environ;

namespace fanstore::cli {
namespace {

const char kRunHelp[] =
    "Usage: fanstore run DS.fs [--mount PATH] [--local-dir DIR] [--timeout SEC] [--unpack MODE]\n"
    "                    -- COMMAND [ARGS...]\n"
    "\n"
    "Serves the dataset DS.fs on this machine without Slurm: starts an agent that stages the\n"
    "dataset into a private directory under DIR, waits until it is ready, runs COMMAND with the\n"
    "interception library so that the dataset appears read-only at PATH, and removes\n"
    "everything when COMMAND ends, also when it fails or is killed.\n"
    "Exits with COMMAND's exit status (128+N when it died of signal N), or 1 when the dataset\n"
    "cannot be served (COMMAND is then not started).\n"
    "\n"
    "Options:\n"
    "  --mount PATH      virtual path of the dataset (default /fanstore/NAME, NAME being the\n"
    "                    dataset directory's name without .fs)\n"
    "  --local-dir DIR   where the staged copy goes (default $TMPDIR, else /tmp)\n"
    "  --timeout SEC     give up when stage-in takes longer (default: no limit)\n"
    "  --unpack MODE     auto (default), eager or lazy: when the files are unpacked, see\n"
    "                    fanstore-agent --help\n"
    "  -v, --verbose     show the agent's progress and statistics (default: only errors)\n"
    "\n"
    "Environment: FANSTORE_AGENT and FANSTORE_PRELOAD override where the agent binary and the\n"
    "interception library are looked up (default: next to this program, then the install\n"
    "directories).\n";

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, n);
  return p.substr(0, p.rfind('/'));
}

// The first existing candidate, or the last one (for the error message).
std::string Locate(const char* env_name, const std::vector<std::string>& candidates) {
  if (const char* e = std::getenv(env_name)) return e;
  for (const auto& c : candidates)
    if (::access(c.c_str(), R_OK) == 0) return c;
  return candidates.back();
}

std::string DefaultMount(std::string ds) {
  while (ds.size() > 1 && ds.back() == '/') ds.pop_back();
  std::string name = ds.substr(ds.rfind('/') + 1);
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".fs") == 0) name.resize(name.size() - 3);
  return "/fanstore/" + name;
}

std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[4096];
  if (!::getcwd(cwd, sizeof cwd)) return p;
  return std::string(cwd) + "/" + p;
}

// Reads status.json; "" while it is absent or being replaced.
std::string ReadState(const std::string& run_dir, std::string* error) {
  auto text = ReadSmallFile(run_dir + "/" + run_dir::kStatusName, 1 << 20);
  if (!text.ok()) return "";
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("state") || !j["state"].is_string()) return "";
  if (j.contains("error") && j["error"].is_string()) *error = j["error"].get<std::string>();
  return j["state"].get<std::string>();
}

bool Exited(pid_t pid, int* wstatus) { return ::waitpid(pid, wstatus, WNOHANG) == pid; }

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
    char buf[PATH_MAX] = {};
    const ssize_t n = ::read(launcher.get(), buf, sizeof buf - 1);
    const std::string local_dir = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    // Only a local directory of ours, named as runs name them.
    struct stat ls;
    if (local_dir.find("/fanstore-local.") != std::string::npos && ::lstat(local_dir.c_str(), &ls) == 0 &&
        S_ISDIR(ls.st_mode) && ls.st_uid == ::getuid())
      (void)RemoveTree(local_dir);
    (void)RemoveTree(run_dir);
    std::fprintf(stderr, "fanstore: run: removed what a killed run left: %s%s%s\n", run_dir.c_str(),
                 local_dir.empty() ? "" : ", ", local_dir.c_str());
  }
}

}  // namespace

int CmdRun(int argc, char** argv) {
  // Options end at "--"; COMMAND follows.
  int dashdash = -1;
  for (int i = 1; i < argc; i++)
    if (!std::strcmp(argv[i], "--")) {
      dashdash = i;
      break;
    }
  int opt_argc = dashdash < 0 ? argc : dashdash;
  for (int i = 1; i < opt_argc; i++)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kRunHelp, stdout);
      return kExitOk;
    }
  std::string mount, local_parent, timeout_s, unpack = "auto";
  bool verbose = false;
  static const option kOpts[] = {{"mount", required_argument, nullptr, 'm'},
                                 {"local-dir", required_argument, nullptr, 'l'},
                                 {"timeout", required_argument, nullptr, 't'},
                                 {"unpack", required_argument, nullptr, 'u'},
                                 {"verbose", no_argument, nullptr, 'v'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(opt_argc, argv, "v", kOpts, nullptr)) != -1) {
    switch (c) {
      case 'm': mount = optarg; break;
      case 'l': local_parent = optarg; break;
      case 't': timeout_s = optarg; break;
      case 'u': unpack = optarg; break;
      case 'v': verbose = true; break;
      default: std::fputs(kRunHelp, stderr); return kExitUsage;
    }
  }
  auto usage = [](const std::string& e) {
    std::fprintf(stderr, "fanstore: %s\n\n%s", e.c_str(), kRunHelp);
    return kExitUsage;
  };
  if (optind != opt_argc - 1) return usage("run needs exactly one DS.fs before --");
  if (dashdash < 0 || dashdash + 1 >= argc) return usage("run needs -- COMMAND");
  if (unpack != "auto" && unpack != "eager" && unpack != "lazy") return usage("bad --unpack '" + unpack + "' (auto, eager or lazy)");
  double timeout = 0;
  if (!timeout_s.empty()) {
    char* end;
    timeout = std::strtod(timeout_s.c_str(), &end);
    if (*end || timeout <= 0) return usage("bad --timeout '" + timeout_s + "'");
  }
  const std::string ds = Absolute(argv[optind]);
  if (mount.empty()) mount = DefaultMount(ds);
  if (mount[0] != '/' || mount == "/") return usage("--mount must be an absolute path other than /");
  while (mount.size() > 1 && mount.back() == '/') mount.pop_back();
  // Check the dataset before starting anything, for a clear message.
  auto m = format::LoadManifest(ds);
  if (!m.ok()) {
    std::fprintf(stderr, "fanstore: run: %s\n", m.status().ToString().c_str());
    return kExitBad;
  }

  const std::string self = SelfDir();
  const std::string agent = Locate("FANSTORE_AGENT", {self + "/fanstore-agent", FANSTORE_INSTALL_BINDIR "/fanstore-agent"});
  const std::string preload = Locate("FANSTORE_PRELOAD", {self + "/../lib/libfanstore_preload.so",
                                                          FANSTORE_INSTALL_LIBDIR "/libfanstore_preload.so"});
  if (::access(agent.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "fanstore: run: agent %s not found (set FANSTORE_AGENT)\n", agent.c_str());
    return kExitBad;
  }
  if (::access(preload.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "fanstore: run: interception library %s not found (set FANSTORE_PRELOAD)\n", preload.c_str());
    return kExitBad;
  }
  if (local_parent.empty()) {
    const char* t = std::getenv("TMPDIR");
    local_parent = t && *t ? t : "/tmp";
  }
  // Private directories: the run directory in shared memory, the data on local storage.
  const std::string run_prefix = "fanstore." + std::to_string(::getuid()) + ".run.";
  std::string run_tmpl = "/dev/shm/" + run_prefix + "XXXXXX";
  if (::access("/dev/shm", W_OK) != 0) run_tmpl = local_parent + "/" + run_prefix + "XXXXXX";
  RemoveLeftovers(run_tmpl.substr(0, run_tmpl.rfind('/')), run_prefix);
  std::string local_tmpl = Absolute(local_parent) + "/fanstore-local.XXXXXX";
  if (!::mkdtemp(run_tmpl.data())) {
    std::fprintf(stderr, "fanstore: run: cannot create a run directory: %s\n", std::strerror(errno));
    return kExitBad;
  }
  if (!::mkdtemp(local_tmpl.data())) {
    std::fprintf(stderr, "fanstore: run: cannot create a directory in %s: %s\n", local_parent.c_str(), std::strerror(errno));
    (void)RemoveTree(run_tmpl);
    return kExitBad;
  }
  const std::string run_dir = run_tmpl, local_dir = local_tmpl;
  auto launcher = HoldLauncher(run_dir, local_dir);
  if (!launcher.ok()) {
    std::fprintf(stderr, "fanstore: run: %s\n", launcher.status().ToString().c_str());
    (void)RemoveTree(local_dir);
    (void)RemoveTree(run_dir);
    return kExitBad;
  }

  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);

  pid_t agent_pid = ::fork();
  if (agent_pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive `fanstore run`
    ::unsetenv("LD_PRELOAD");
    ::setenv(env::kDisable, "1", 1);
    std::vector<const char*> av = {agent.c_str(), "--dataset", ds.c_str(), "--local-dir", local_dir.c_str(),
                                   "--run-dir", run_dir.c_str(), "--mount", mount.c_str(), "--bootstrap", "single",
                                   "--unpack", unpack.c_str()};
    av.push_back(verbose ? "--verbose" : "--quiet");
    av.push_back(nullptr);
    ::execv(agent.c_str(), const_cast<char* const*>(av.data()));
    std::fprintf(stderr, "fanstore: run: cannot start %s: %s\n", agent.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  if (agent_pid < 0) {
    std::fprintf(stderr, "fanstore: run: cannot start the agent: fork: %s\n", std::strerror(errno));
    (void)RemoveTree(local_dir);
    (void)RemoveTree(run_dir);
    return kExitBad;
  }
  auto teardown = [&] {
    int ws;
    if (agent_pid > 0 && !Exited(agent_pid, &ws)) {
      ::kill(agent_pid, SIGTERM);
      for (int i = 0; i < 200 && !Exited(agent_pid, &ws); i++) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      if (::kill(agent_pid, 0) == 0) {
        ::kill(agent_pid, SIGKILL);
        ::waitpid(agent_pid, &ws, 0);
      }
    }
    // Safety net: whatever the agent could not remove.
    (void)RemoveTree(local_dir);
    (void)RemoveTree(run_dir);
  };

  // Wait for readiness (or failure, or the agent's death).
  auto start = std::chrono::steady_clock::now();
  std::string error;
  while (true) {
    std::string state = ReadState(run_dir, &error);
    if (state == "ready") break;
    int ws;
    if (state == "failed" || Exited(agent_pid, &ws)) {
      if (state != "failed") {
        agent_pid = -1;
        // Died without a word (SIGKILL, the OOM killer, a crash): say how.
        if (error.empty() && WIFSIGNALED(ws))
          error = std::string("the agent was killed by signal ") + std::to_string(WTERMSIG(ws)) + " (" +
                  strsignal(WTERMSIG(ws)) + ") during stage-in";
        else if (error.empty() && WIFEXITED(ws))
          error = "the agent exited with status " + std::to_string(WEXITSTATUS(ws)) + " during stage-in";
      }
      std::fprintf(stderr, "fanstore: run: the agent could not serve %s%s%s\n", ds.c_str(), error.empty() ? "" : ": ",
                   error.c_str());
      teardown();
      return kExitBad;
    }
    if (g_signal) {
      std::fprintf(stderr, "fanstore: run: interrupted during stage-in\n");
      teardown();
      return 128 + g_signal;
    }
    if (timeout > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout) {
      std::fprintf(stderr, "fanstore: run: stage-in did not finish within %s s\n", timeout_s.c_str());
      teardown();
      return kExitBad;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, SIG_DFL);
    // After what is already preloaded: a sanitizer runtime must stay first.
    const char* old = std::getenv("LD_PRELOAD");
    std::string lp = old && *old ? std::string(old) + ":" + preload : preload;
    ::setenv("LD_PRELOAD", lp.c_str(), 1);
    ::setenv(env::kMount, mount.c_str(), 1);
    ::setenv(env::kTable, (run_dir + "/" + run_dir::kTableName).c_str(), 1);
    ::setenv(env::kSocket, (run_dir + "/" + run_dir::kSocketName).c_str(), 1);
    ::unsetenv(env::kDisable);
    ::execvp(argv[dashdash + 1], argv + dashdash + 1);
    std::fprintf(stderr, "fanstore: run: cannot run %s: %s\n", argv[dashdash + 1], std::strerror(errno));
    ::_exit(127);
  }
  if (child < 0) {  // never signal -(-1): that would reach every process of the user
    std::fprintf(stderr, "fanstore: run: cannot start %s: fork: %s\n", argv[dashdash + 1], std::strerror(errno));
    teardown();
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
  teardown();
  if (WIFEXITED(ws)) return WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) return 128 + WTERMSIG(ws);
  return kExitBad;
}

}  // namespace fanstore::cli
