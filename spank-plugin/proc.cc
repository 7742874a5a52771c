// Processes and files for the plugin (see proc.h).
#include "spank-plugin/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "common/io.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace fanstore::spank {
namespace {

// argv and envp as the NULL-terminated arrays execve wants, built before fork.
class ExecImage {
 public:
  ExecImage(const std::vector<std::string>& argv, const std::vector<std::string>& env)
      : args_(argv), env_(env) {
    for (auto& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (auto& e : env_) envp_.push_back(e.data());
    envp_.push_back(nullptr);
  }
  [[noreturn]] void Exec() const {
    ::execve(argv_[0], argv_.data(), envp_.data());
    ::_exit(127);
  }

 private:
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;
};

int64_t NowMs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

void SleepMs(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// --- child side: async-signal-safe only ---

// Signal mask and ignored signals survive execve; Slurm's threads block some, so reset them.
void ResetSignals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++)
    ::sigaction(sig, &dfl, nullptr);  // fails harmlessly for some
}

bool BecomeUser(const Credentials& c) {
  if (::getuid() == c.uid && ::geteuid() == c.uid && ::getgid() == c.gid) return true;
  // user_init runs with ruid 0 and euid user: take euid 0 back, then drop everything for good.
  if (::geteuid() != 0 && ::seteuid(0) != 0) return false;
  if (::setgroups(c.groups.size(), c.groups.data()) != 0) return false;
  if (::setresgid(c.gid, c.gid, c.gid) != 0) return false;
  if (::setresuid(c.uid, c.uid, c.uid) != 0) return false;
  uid_t r, e, s;
  return ::getresuid(&r, &e, &s) == 0 && r == c.uid && e == c.uid && s == c.uid;
}

void CloseFrom(int lowfd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, lowfd, ~0U, 0) == 0) return;
#endif
  for (int fd = lowfd; fd < 65536; fd++) ::close(fd);
}

void Redirect(int fd, int target) {
  if (fd >= 0 && fd != target) ::dup2(fd, target);
}

int OpenOutput(const char* path) {
  int fd = -1;
  if (path[0] != '\0')
    fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  return fd;
}

void StdinFromNull() { Redirect(::open("/dev/null", O_RDONLY | O_CLOEXEC), 0); }

// --- parent side ---

int WaitWithTimeout(pid_t pid, int timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return -1;
    if (NowMs() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    SleepMs(10);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Slurm's RLIMIT values are unsigned longs: RLIM_INFINITY is beyond ParseInt's range.
std::optional<rlim_t> ParseLimit(const std::string& value) {
  if (value == std::to_string(RLIM_INFINITY)) return RLIM_INFINITY;
  if (auto v = ParseInt(value, 0, INT64_MAX)) return static_cast<rlim_t>(*v);
  return std::nullopt;
}

}  // namespace

pid_t ReadPidFile(const std::string& path) {
  auto text = ReadSmallFile(path, 64);
  if (!text.ok()) return -1;
  std::string_view digits = text.value();
  if (!digits.empty() && digits.back() == '\n') digits.remove_suffix(1);
  return static_cast<pid_t>(ParseInt(digits, 1, kMaxPid).value_or(-1));
}

std::vector<std::pair<int, rlim_t>> JobLimits(const std::vector<std::string>& env) {
  static const std::pair<const char*, int> kNames[] = {
      {"CPU", RLIMIT_CPU},     {"FSIZE", RLIMIT_FSIZE},   {"DATA", RLIMIT_DATA},
      {"STACK", RLIMIT_STACK}, {"CORE", RLIMIT_CORE},     {"RSS", RLIMIT_RSS},
      {"NPROC", RLIMIT_NPROC}, {"NOFILE", RLIMIT_NOFILE}, {"MEMLOCK", RLIMIT_MEMLOCK},
      {"AS", RLIMIT_AS}};
  std::vector<std::pair<int, rlim_t>> out;
  for (const std::string& kv : env) {
    constexpr size_t kPrefix = sizeof env::kSlurmRlimitPrefix - 1;
    if (kv.rfind(env::kSlurmRlimitPrefix, 0) != 0) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(kPrefix, eq - kPrefix);
    const std::optional<rlim_t> v = ParseLimit(kv.substr(eq + 1));
    if (!v) continue;
    for (const auto& [n, res] : kNames)
      if (name == n) out.emplace_back(res, *v);
  }
  return out;
}

void ApplyLimits(const std::vector<std::pair<int, rlim_t>>& limits) {
  for (const auto& [res, value] : limits) {
    struct rlimit rl;
    if (::getrlimit(res, &rl) != 0) continue;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? value : std::min<rlim_t>(value, rl.rlim_max);
    (void)::setrlimit(res, &rl);
  }
}

Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const Credentials* creds, const std::string& out_path) {
  if (argv.empty()) return Status::InvalidArgument("Spawn: empty argv");
  const ExecImage image(argv, env);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork", errno);
  if (pid == 0) {
    ResetSignals();
    if (creds != nullptr) ApplyLimits(creds->limits);
    if (creds != nullptr && !BecomeUser(*creds)) ::_exit(126);
    ::setsid();
    StdinFromNull();
    const int out = OpenOutput(out_path.c_str());
    Redirect(out, 1);
    Redirect(out, 2);
    CloseFrom(3);
    image.Exec();
  }
  return pid;
}

namespace {

// The supervisor process: in its own session, so that ^C on the user's srun does not reach the
// agents' srun. Waits for the parent's go on `go`, runs the image with its output in log_path,
// and removes the lock and the log when it ends.
[[noreturn]] void Supervise(const ExecImage& image, int go, const std::string& lock_path,
                            const std::string& log_path) {
  ResetSignals();
  ::setsid();
  StdinFromNull();
  const int null_out = OpenOutput("");
  Redirect(null_out, 1);
  Redirect(null_out, 2);
  char c = 0;
  ssize_t n;
  do n = ::read(go, &c, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1 || c != 'g') ::_exit(0);  // another supervisor holds the lock
  const pid_t child = ::fork();
  if (child == 0) {
    const int out = OpenOutput(log_path.c_str());
    Redirect(out, 1);
    Redirect(out, 2);
    CloseFrom(3);
    image.Exec();
  }
  CloseFrom(3);
  int status;
  if (child > 0)
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  ::unlink(log_path.c_str());
  ::unlink(lock_path.c_str());
  ::_exit(0);
}

// Takes lock_path for the supervisor `sup`: writes its pid to a private file, then links that
// to the lock name. False when a live supervisor holds the lock; a stale one is taken over.
Result<bool> TakeLaunchLock(const std::string& lock_path, pid_t sup) {
  const std::string tmp = lock_path + ".tmp." + std::to_string(::getpid());
  ScopeExit remove_tmp([&] { ::unlink(tmp.c_str()); });
  for (int attempt = 0; attempt < 2; attempt++) {
    ::unlink(tmp.c_str());
    UniqueFD fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return Status::FromErrno("create " + tmp, errno);
    if (!WriteAll(fd.get(), std::to_string(sup) + "\n"))
      return Status::IOError("cannot write " + tmp);
    fd.Reset();
    if (::link(tmp.c_str(), lock_path.c_str()) == 0) return true;
    if (errno != EEXIST) return Status::FromErrno("link " + lock_path, errno);
    const pid_t holder = ReadPidFile(lock_path);
    if (holder > 0 && ProcessAlive(holder)) return false;  // agents already started for this job
    ::unlink(lock_path.c_str());                           // stale: its supervisor is gone
  }
  return false;
}

}  // namespace

Result<bool> SpawnSupervised(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const std::string& lock_path,
                             const std::string& log_path) {
  if (argv.empty()) return Status::InvalidArgument("SpawnSupervised: empty argv");
  const ExecImage image(argv, env);
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  UniqueFD go_read(go[0]), go_write(go[1]);
  const pid_t sup = ::fork();
  if (sup < 0) return Status::FromErrno("fork", errno);
  if (sup == 0) {
    go_write.Reset();
    Supervise(image, go_read.get(), lock_path, log_path);
  }
  go_read.Reset();
  Result<bool> taken = TakeLaunchLock(lock_path, sup);
  const bool started = taken.ok() && taken.value();
  if (started) WriteAll(go_write.get(), "g");
  go_write.Reset();  // without a go, the supervisor exits at once
  if (!started) {
    int status;
    while (::waitpid(sup, &status, 0) < 0 && errno == EINTR) {
    }
  }
  return taken;
}

Result<int> RunCapture(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const Credentials* creds, int timeout_ms, std::string* out) {
  if (argv.empty()) return Status::InvalidArgument("RunCapture: empty argv");
  const ExecImage image(argv, env);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  UniqueFD out_read(p[0]), out_write(p[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork", errno);
  if (pid == 0) {
    ResetSignals();
    if (creds != nullptr && !BecomeUser(*creds)) ::_exit(126);
    StdinFromNull();
    Redirect(out_write.get(), 1);
    Redirect(OpenOutput(""), 2);
    CloseFrom(3);
    image.Exec();
  }
  out_write.Reset();
  out->clear();
  const int64_t deadline = NowMs() + timeout_ms;
  char buf[4096];
  for (;;) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) break;
    struct pollfd pfd = {out_read.get(), POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    const ssize_t n = ::read(out_read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out->size() < 65536) out->append(buf, static_cast<size_t>(n));
  }
  out_read.Reset();
  return WaitWithTimeout(pid, static_cast<int>(std::max<int64_t>(deadline - NowMs(), 0)));
}

Result<int> RunAsUser(const Credentials& creds, int timeout_ms, const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork", errno);
  if (pid == 0) {
    ResetSignals();
    if (!BecomeUser(creds)) ::_exit(126);
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
    }
    ::_exit(rc & 0xff);
  }
  return WaitWithTimeout(pid, timeout_ms);
}

char ProcessState(pid_t pid) {
  auto stat = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!stat.ok()) return '\0';
  const std::string& s = stat.value();
  const size_t close = s.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= s.size()) return '\0';
  return s[close + 2];
}

bool ProcessAlive(pid_t pid) {
  const char st = ProcessState(pid);
  return st != '\0' && st != 'Z' && st != 'X' && st != 'x';
}

std::vector<pid_t> FindProcesses(uid_t uid, const std::vector<std::string>& env_entries) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (struct dirent* e = ::readdir(proc)) {
    const int64_t pid = ParseInt(e->d_name, 1, kMaxPid).value_or(0);
    if (pid == 0 || pid == ::getpid()) continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || st.st_uid != uid) continue;
    // Bounded well above what execve accepts with the usual 8 MiB stack (a quarter of it).
    auto environ = ReadSmallFile(dir + "/environ", 8 << 20);
    if (!environ.ok()) continue;
    const std::vector<std::string_view> vars = Split(environ.value(), '\0');
    bool all = true;
    for (const auto& want : env_entries)
      all = all && std::find(vars.begin(), vars.end(), want) != vars.end();
    if (all && ProcessAlive(static_cast<pid_t>(pid))) found.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return found;
}

namespace {

// Those of `pids` still alive when they are all gone or `ms` have passed.
std::vector<pid_t> WaitGone(std::vector<pid_t> alive, int ms) {
  const int64_t deadline = NowMs() + ms;
  for (;;) {
    std::vector<pid_t> still;
    for (pid_t p : alive)
      if (ProcessAlive(p)) still.push_back(p);
    alive.swap(still);
    if (alive.empty() || NowMs() >= deadline) return alive;
    SleepMs(20);
  }
}

}  // namespace

std::vector<pid_t> TerminateProcesses(const std::vector<pid_t>& pids, int grace_ms, int kill_ms) {
  for (pid_t p : pids) ::kill(p, SIGTERM);
  std::vector<pid_t> alive = WaitGone(pids, grace_ms);
  for (pid_t p : alive) ::kill(p, SIGKILL);
  // A process with gigabytes resident takes a while to go after SIGKILL: its memory is freed
  // first. Only one still there at the deadline is reported.
  return WaitGone(std::move(alive), kill_ms);
}

std::string TailOfFile(const std::string& path, int max_lines, uid_t owner, size_t window) {
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != owner)
    return "";
  const off_t from = std::max<off_t>(st.st_size - static_cast<off_t>(window), 0);
  std::string s(static_cast<size_t>(st.st_size - from), '\0');
  if (!PreadFull(fd.get(), s.data(), s.size(), static_cast<uint64_t>(from), path).ok()) return "";
  while (!s.empty() && s.back() == '\n') s.pop_back();
  size_t pos = s.size();
  for (int i = 0; i < max_lines && pos != std::string::npos && pos > 0; i++)
    pos = s.rfind('\n', pos - 1);
  return pos == std::string::npos ? s : s.substr(pos + 1);
}

}  // namespace fanstore::spank
