// Remote context (slurmstepd of the batch step and of each srun step, on every node of the step).
//
//  - Batch step, user_init: starts the agent step (srun --overlap --mpi=pmix, one agent per node,
//  as the
//    job user), then waits until this node's agent is ready before the batch script starts.
//  - Every other step, user_init: waits until this node's agent is ready.
//  - Both then give the tasks LD_PRELOAD and FANSTORE_MOUNT/TABLE/SOCKET.
//  - Batch step, task_exit: the batch script has ended; the agents are asked to stop while
//    their srun still runs (see StepdTaskExit).
//  - The agent step itself (FANSTORE_AGENT_STEP=1): only sets this node's directories for the
//  agent.
//
// Errors from user_init do not fail the step or reach srun
// (https://bugs.schedmd.com/show_bug.cgi?id=7573), so user_init records them and
// task_init_privileged reports them, as NVIDIA/pyxis does.
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "common/io.h"
#include "common/proto.h"
#include "common/run_dir.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "image/mount_service.h"
#include "output/drainer.h"
#include "spank-plugin/agent_wait.h"
#include "spank-plugin/dirs.h"
#include "spank-plugin/hooks.h"
#include "spank-plugin/options.h"
#include "spank-plugin/plugin_state.h"

namespace fanstore::spank {
namespace {

constexpr char kPhase[] = "user_init";
// How long the batch step's end waits for the agents to stop, drain aside.
constexpr int kStopAgentsMs = 5000;

Status SetTaskEnv(spank_t sp, const char* name, const std::string& value) {
  const spank_err_t rc = spank_setenv(sp, name, value.c_str(), 1);
  if (rc != ESPANK_SUCCESS)
    return Status::IOError(std::string("cannot set ") + name + ": " + spank_strerror(rc));
  return Status::OK();
}

// squeue lives beside srun.
std::string SqueuePath(const Config& config) {
  const size_t slash = config.srun.rfind('/');
  return config.srun.substr(0, slash + 1) + "squeue";
}

Status PrepareAgentStep(spank_t sp, const JobIdentity& id) {
  PluginState& s = State();
  const Config& c = s.config;
  s.local_dir = LocalDir(c, id);  // for the mount service, in task_init_privileged
  s.uid = id.uid;
  auto creds = GetJobCredentials(sp);
  if (!creds.ok()) return creds.status();
  s.gid = creds->gid;
  FS_RETURN_IF_ERROR(SetTaskEnv(sp, kEnvAgentLocalDir, s.local_dir));
  FS_RETURN_IF_ERROR(SetTaskEnv(sp, env::kAgentOutputDir, OutputDir(c, id)));
  return SetTaskEnv(sp, kEnvAgentRunDir, RunDir(c, id));
}

// Starts the agent step from the batch step. Returns the helper srun's pid.
Result<pid_t> StartAgents(spank_t sp, const JobIdentity& id, const Credentials& creds) {
  const PluginState& s = State();
  if (::access(s.config.agent.c_str(), X_OK) != 0)
    return Status::NotFound("the FanStore agent " + s.config.agent +
                            " is not executable on this node (plugstack agent=)");
  auto count = ParseNodeCount(JobGetenv(sp, env::kSlurmJobNumNodes));
  if (!count.ok()) return count.status();
  const uint32_t nodes = count.value();
  if (nodes == 0)
    return Status::IOError(std::string(env::kSlurmJobNumNodes) +
                           " is not set in the batch step");  // S_JOB_NNODES is 0 here
  auto step = MakeAgentStep(s.config, s.options, id.job, nodes,
                            JobGetenv(sp, env::kSlurmSubmitDir).value_or(""));
  if (!step.ok()) return step.status();
  // The prolog claimed these on every node; here too, in case the site runs no prolog on the
  // batch node: the launch log must never go into a file someone else planted (F12).
  for (const std::string& dir :
       JobDirs(s.config, id, !s.options.dataset.empty(), !s.options.output.empty())) {
    std::string moved;
    Status claimed = ClaimDir(dir, creds.uid, creds.gid, &moved);
    if (!claimed.ok()) return claimed.Prefixed("cannot prepare the job's directories");
    if (!moved.empty())
      LogError(kPhase,
               "moved aside " + moved + ", planted in the way of job " + std::to_string(id.job));
  }
  // The agents run with the job's limits, not slurmstepd's (root's).
  Credentials user = creds;
  user.limits = JobLimits(JobEnvironment(sp));
  auto pid = Spawn(AgentStepArgv(step.value()), AgentStepEnv(JobEnvironment(sp), s.config.preload),
                   &user, LaunchLog(s.config, id));
  if (!pid.ok()) return pid.status().Prefixed("cannot start the FanStore agents");
  if (!step->output.empty()) State().drain_timeout_s = step->drain_timeout;
  LogVerbose(kPhase, "started the FanStore agent step of job " + std::to_string(id.job) + " on " +
                         std::to_string(nodes) + " node(s), srun pid " +
                         std::to_string(pid.value()));
  return pid.value();
}

// Whether `fd` is, in this process, a pidfd of `pid` (its fdinfo's "Pid:" line).
bool IsPidfdOf(int fd, pid_t pid) {
  std::FILE* f = std::fopen(("/proc/self/fdinfo/" + std::to_string(fd)).c_str(), "re");
  if (f == nullptr) return false;
  char line[128];
  bool match = false;
  while (!match && std::fgets(line, sizeof line, f))
    match = std::strncmp(line, "Pid:", 4) == 0 && std::atol(line + 4) == pid;
  std::fclose(f);
  return match;
}

// The channel over which the batch task hands its stderr (the job's output file, which Slurm
// opens in the task only) back to slurmstepd, for task_exit's report on the output's drain.
void OpenReportChannel() {
  PluginState& s = State();
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;  // no report there
  s.report_parent = fds[0];
  s.report_child = fds[1];
  (void)::fcntl(s.report_parent, F_SETFL, O_NONBLOCK);
}

// In the batch task, just before it executes the script (stdio is the job's by then).
void HandStderrToStepd() {
  PluginState& s = State();
  if (s.report_child < 0) return;
  const proto::Frame f = {proto::kMagic, 0, 0, 0};
  (void)proto::Send(s.report_child, f, nullptr, STDERR_FILENO);
}

// In slurmstepd, after the batch task ended: its stderr, when it handed it over.
UniqueFD TakeJobStderr() {
  PluginState& s = State();
  UniqueFD parent(s.report_parent), child(s.report_child);
  s.report_parent = s.report_child = -1;
  proto::Frame f;
  int fd = -1;
  if (!parent.valid() || proto::Recv(parent.get(), &f, nullptr, 0, &fd) != 0) return UniqueFD();
  return UniqueFD(fd);
}

// What the agents said about the output's drain: to the job's stderr and to slurmd's log. The
// user's log is read, and the user's descriptor written, by a child that has become the job
// user and is stopped after kReportMs: a FIFO nobody reads, or a FUSE file system that never
// answers, holds that child, never slurmstepd. The lines come back over a pipe, at most 16 KiB
// (under a pipe's capacity, so the child never waits for us).
void ReportDrain(UniqueFD job_stderr) {
  constexpr int kReportMs = 3000;
  constexpr size_t kMaxLines = 200, kMaxBytes = 16 << 10;
  const PluginState& s = State();
  const std::string job = "job " + std::to_string(s.job) + ": ";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  UniqueFD from_child(fds[0]), to_parent(fds[1]);
  auto rc = RunAsUser(s.creds, kReportMs, [&] {
    from_child.Reset();
    std::string text;
    for (const std::string& line :
         OutputReportLines(TailOfFile(s.launch_log, INT32_MAX, s.creds.uid, 1 << 20), kMaxLines))
      if (text.size() + line.size() + 1 <= kMaxBytes) text += line + "\n";
    (void)WriteFull(to_parent.get(), text.data(), text.size(), "report");
    to_parent.Reset();
    for (std::string_view line : Split(text, '\n'))
      if (!line.empty() && job_stderr.valid()) {
        const std::string out = "fanstore: " + std::string(line) + "\n";
        (void)WriteFull(job_stderr.get(), out.data(), out.size(), "stderr");
      }
    return 0;
  });
  to_parent.Reset();
  std::string text(kMaxBytes, '\0');
  const ssize_t n = ::read(from_child.get(), text.data(), text.size());
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (!rc.ok() || rc.value() != 0)
    LogError("task_exit", job + "the report on the output's drain was cut short (" +
                              (rc.ok() ? "stopped after " + std::to_string(kReportMs / 1000) + " s"
                                       : rc.status().message()) +
                              ")");
  if (text.empty())
    LogError("task_exit",
             job + "the agents said nothing about the output's drain; see " + s.launch_log);
  for (std::string_view line : Split(text, '\n'))  // the user's log's words: never as errors
    if (!line.empty()) LogInfo("task_exit", job + "agent report: " + std::string(line));
}

Status ServeStep(spank_t sp) {
  PluginState& s = State();
  auto id = GetJobIdentity(sp);
  if (!id.ok()) return id.status();
  auto creds = GetJobCredentials(sp);
  if (!creds.ok()) return creds.status();
  uint32_t stepid = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
    return Status::IOError("cannot get the step id");
  FS_RETURN_IF_ERROR(CheckUserOptions(s.options, s.config));
  const bool dataset = !s.options.dataset.empty();
  Result<std::string> mount = std::string();
  if (dataset) mount = ResolveMount(s.options, s.config);
  if (!mount.ok()) return mount.status();
  if (dataset && ::access(s.config.preload.c_str(), R_OK) != 0)
    return Status::NotFound("the interception library " + s.config.preload + " is missing on " +
                            id->node + " (plugstack preload=)");

  WaitRequest wait;
  if (stepid == SLURM_BATCH_SCRIPT) {
    auto helper = StartAgents(sp, id.value(), creds.value());
    if (!helper.ok()) return helper.status();
    wait.helper = helper.value();
    // A pidfd, taken while the child cannot have been reaped: a signal through it never
    // reaches a process that reused the pid.
    // (System calls: glibc 2.36's <sys/pidfd.h> lacks extern "C".)
    s.agent_srun = static_cast<int>(::syscall(SYS_pidfd_open, helper.value(), 0));
    s.agent_srun_pid = helper.value();
    wait.launch_log = LaunchLog(s.config, id.value());
    s.launch_log = wait.launch_log;
    s.job = id->job;
    s.creds = creds.value();
    FS_RETURN_IF_ERROR(SetTaskEnv(sp, kEnvJobAgents, std::to_string(id->job)));
    if (!s.options.output.empty()) OpenReportChannel();
  }
  wait.run_dir = RunDir(s.config, id.value());
  wait.node = id->node;
  wait.uid = id->uid;
  wait.job = id->job;
  wait.timeout_s = s.config.stagein_timeout;
  wait.squeue = SqueuePath(s.config);
  wait.squeue_env = ProcessEnvironment();
  wait.creds = &creds.value();
  double waited = 0;
  Status ready = WaitForAgent(wait, &waited);
  if (!ready.ok()) return ready;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", waited);
  const std::string step = stepid == SLURM_BATCH_SCRIPT ? "batch" : std::to_string(stepid);
  LogInfo(kPhase, "job " + std::to_string(id->job) + " step " + step + " on " + id->node +
                      ": agent ready after " + secs + " s");
  s.run_dir = wait.run_dir;
  s.socket = wait.run_dir + "/" + run_dir::kSocketName;
  FS_RETURN_IF_ERROR(SetTaskEnv(sp, env::kSocket, s.socket));  // `fanstore stats` asks it
  if (!s.options.output.empty())
    FS_RETURN_IF_ERROR(SetTaskEnv(sp, env::kOutput, OutputDir(s.config, id.value())));
  if (!dataset) return Status::OK();  // output only: no dataset to see
  s.local_dir = LocalDir(s.config, id.value());
  s.uid = id->uid;
  s.gid = creds->gid;
  s.mount = mount.value();

  const std::string preload =
      PrependPreload(JobGetenv(sp, env::kLdPreload).value_or(""), s.config.preload);
  FS_RETURN_IF_ERROR(SetTaskEnv(sp, env::kLdPreload, preload));
  FS_RETURN_IF_ERROR(SetTaskEnv(sp, env::kMount, mount.value()));
  return SetTaskEnv(sp, env::kTable, wait.run_dir + "/" + run_dir::kTableName);
}

// The agent takes requests from its own uid alone: the task, still root, connects with the job
// user's effective ids, then takes root's back (its real ids stay root's throughout, so the user
// can neither signal nor trace it meanwhile).
Status HandOverAsUser(const std::string& socket, int dev, uid_t uid, gid_t gid) {
  if (::setegid(gid) != 0) return Status::FromErrno("setegid", errno);
  if (::seteuid(uid) != 0) {
    const int err = errno;
    (void)!::setegid(0);
    return Status::FromErrno("seteuid", err);
  }
  Status st = HandOverView(socket, dev);
  if (::seteuid(0) != 0 || ::setegid(0) != 0)
    LogError("task_init", std::string("cannot take root's ids back: ") + std::strerror(errno));
  return st;
}

// In the task's namespace, as root: the agent's EROFS image bound at the task's mount when the
// node holds every shard (status.json: local_copy "image", whole). The image is found again
// through a walk that follows no symlink to the job's local directory, and must be an EROFS
// root there: only root mounts one, so it is the mount service's. NotFound when there is no such
// image (the FUSE view then serves).
Status BindImageView(const PluginState& s) {
  auto status = run_dir::ReadStatus(s.run_dir);
  if (!status.ok() || !status->image || !status->whole)
    return Status::NotFound("no image of the whole dataset");
  const UniqueFD data = image::FindImage(s.local_dir, s.uid);
  if (!data.valid()) return Status::NotFound("no image mounted at " + s.local_dir + "/data");
  return BindKernelView(s.mount, data.get());
}

// The agent step's task, still root: the agent's image (issue 31) is mounted by a service of
// root's that it inherits a socket to (image/mount_service.h), when the administrator allows it
// (image=auto) and the local directory is on a disk (the kernel mounts no image from tmpfs; the
// job's own tmpfs is dropped whole anyway). Without it the agent keeps files, as before.
int StartImageService(spank_t sp) {
  PluginState& s = State();
  struct statfs fs;
  if (!s.config.image || s.local_dir.empty() || ::statfs(s.local_dir.c_str(), &fs) != 0 ||
      fs.f_type == TMPFS_MAGIC)
    return 0;
  auto sock = image::StartMountService(s.local_dir, s.uid, s.gid);
  if (!sock.ok()) {
    LogError("task_init", "no image for the agent: " + sock.status().message());
    return 0;
  }
  const std::string fd = std::to_string(sock->get());
  if (spank_setenv(sp, env::kMountService, fd.c_str(), 1) != ESPANK_SUCCESS) {
    LogError("task_init", std::string("cannot set ") + env::kMountService);
    return 0;
  }
  (void)sock->Release();  // the agent's, across its exec
  return 0;
}

}  // namespace

int StepdInit(spank_t sp, int ac, char** av) {
  if (LoadConfig(ac, av, "init") != 0) return -1;
  return RegisterOptions(sp, "init");
}

int StepdPostOpt(spank_t sp, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  s.agent_step = JobGetenv(sp, kEnvAgentStep).value_or("") == "1";
  s.enabled = s.agent_step || s.options.used();
  return 0;
}

int StepdUserInit(spank_t sp, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  if (!s.enabled) return 0;
  uint32_t stepid = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &stepid) == ESPANK_SUCCESS && stepid == SLURM_EXTERN_CONT)
    return 0;
  Status st;
  if (s.agent_step) {
    auto id = GetJobIdentity(sp);
    st = id.ok() ? PrepareAgentStep(sp, id.value()) : id.status();
  } else {
    st = ServeStep(sp);
  }
  if (!st.ok()) {
    s.deferred_error = st.message();
    LogVerbose(kPhase, "failed; reporting it from task_init_privileged: " + st.message());
  }
  return 0;
}

int StepdTaskInitPrivileged(spank_t sp, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  if (!s.enabled) return 0;
  if (!s.deferred_error.empty()) {
    LogError("task_init", s.deferred_error);
    return -1;
  }
  if (s.agent_step) return StartImageService(sp);
  if (s.local_dir.empty()) return 0;
  // Neither view is a condition of serving: a node that cannot make them still serves.
  Status st = PrivateMountNamespace();
  if (!st.ok()) {
    LogError("task_init",
             "no namespace of the task's own, so the staged copy stays writable and "
             "there is no kernel-visible view: " +
                 st.message());
    return 0;
  }
  st = ReadOnlyView(s.local_dir, s.uid);
  if (!st.ok())
    LogError("task_init", "the staged copy stays writable for this task: " + st.message());
  if (!s.config.kernel_view) return 0;
  if (Status ok = KernelViewAllowed(s.mount, s.config.mount_prefix); !ok.ok()) {
    s.view_error = ok.message();
    return 0;
  }
  // The node's EROFS image, when it holds the whole dataset: the kernel serves the view itself.
  if (Status bound = BindImageView(s); bound.ok()) {
    return 0;
  } else if (bound.code() != Status::Code::kNotFound) {
    LogError("task_init", "the image could not be the view, FUSE serves it: " + bound.message());
  }
  auto view = MountKernelView(s.mount, s.uid, s.gid);
  if (!view.ok()) {
    s.view_error = view.status().message();
    return 0;
  }
  // Handed over at once, before Slurm enters the task's working directory, which may be in the
  // mount: nothing under it may be touched before the agent serves it (its only reader).
  Status handed = HandOverAsUser(s.socket, view->get(), s.uid, s.gid);
  if (!handed.ok()) s.view_error = handed.message();
  return 0;  // the view's descriptor closes here: the agent's copy is the one that serves
}

int StepdTaskInit(spank_t sp, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  if (!s.enabled || s.agent_step) return 0;
  HandStderrToStepd();
  if (s.local_dir.empty()) return 0;
  if (!s.config.kernel_view) s.view_error = "turned off by the administrator (kernel_view=no)";
  if (!s.view_error.empty())
    LogInfo("task_init", "no kernel-visible view at " + s.mount + ": " + s.view_error);
  // Tells the task's programs (and the user) whether it is there.
  const std::string state = s.view_error.empty() ? "on" : "off: " + s.view_error;
  if (spank_setenv(sp, env::kKernelView, state.c_str(), 1) != ESPANK_SUCCESS)
    LogError("task_init", std::string("cannot set ") + env::kKernelView);
  return 0;
}

// When the batch script ends, slurmstepd kills what is left of the batch step, the agent step's
// srun among it; the agents' slurmstepds then retry reporting their tasks' exit to that srun for
// 2.3 s (0.1 s doubling to 0.8 s) before the step ends and the epilog can start. So the agents
// are stopped first, while srun still runs: srun forwards SIGUSR2 to every agent (SIGTERM would
// make it cancel the step), each shuts down cleanly (its files, its counters, its output's
// drain), and srun exits on their exits. Bounded: after kStopAgentsMs, and the drain's bound
// with --fanstore-output, Slurm's own kill goes ahead as before. The job stays running meanwhile.
int StepdTaskExit(spank_t /*sp*/, int /*ac*/, char** /*av*/) {
  PluginState& s = State();
  const int wait_ms =
      kStopAgentsMs +
      (s.options.output.empty() ? 0 : s.drain_timeout_s * 1000 + output::kFinishSlackMs);
  const int fd = s.agent_srun;
  s.agent_srun = -1;  // once, for the batch script's one task
  // Only this process's own pidfd of srun: were user_init ever run in another process (a
  // CLONE_VM child in later Slurms), the number would be one of slurmstepd's own descriptors.
  if (fd < 0 || !IsPidfdOf(fd, s.agent_srun_pid)) return 0;
  const UniqueFD srun(fd);
  if (::syscall(SYS_pidfd_send_signal, srun.get(), SIGUSR2, nullptr, 0) != 0) return 0;
  struct pollfd ended = {srun.get(), POLLIN, 0};  // readable once srun has exited
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  int n;
  do {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    n = ::poll(&ended, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
  } while (n < 0 && errno == EINTR);
  if (n == 0)
    LogVerbose("task_exit", "the agent step did not end within " + std::to_string(wait_ms / 1000) +
                                " s; Slurm ends it");
  if (!s.options.output.empty()) ReportDrain(TakeJobStderr());
  return 0;
}

}  // namespace fanstore::spank
