// Waiting for this node's agent (see agent_wait.h).
#include "spank-plugin/agent_wait.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>

#include "common/io.h"
#include "common/run_dir.h"
#include "spank-plugin/job.h"

namespace fanstore::spank {
namespace {

constexpr int kPollMs = 50;
// squeue: often at first (a cancellation should end the wait quickly), rarely on a long stage-in.
constexpr double kSqueueFastSeconds = 2, kSqueueSlowSeconds = 10, kSqueueFastPhaseSeconds = 60;
constexpr double kAgentStepGraceSeconds =
    30;  // the agent step may not exist yet right after launch

double Now() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// The agent's status, or an error state; *present tells whether the run directory exists.
struct Observation {
  bool present = false;
  bool have_status = false;
  run_dir::RunStatus status;
  Status problem;  // a run directory we must not trust
};

Observation Observe(const WaitRequest& req) {
  Observation o;
  struct stat st;
  if (::lstat(req.run_dir.c_str(), &st) != 0) return o;
  o.present = true;
  if (!S_ISDIR(st.st_mode) || st.st_uid != req.uid || (st.st_mode & 077) != 0) {
    o.problem =
        Status::Permission("the agent's run directory " + req.run_dir +
                           " is not a private directory of the job user; refusing to use it");
    return o;
  }
  auto status = run_dir::ReadStatus(req.run_dir);
  if (!status.ok()) return o;  // not written yet
  // The directory renamed or removed while it was read takes the agent's lock with it, which
  // reads as an agent that died: it is gone, as the next look would find.
  if (status->Dead() && ::lstat(req.run_dir.c_str(), &st) != 0) return Observation{};
  o.have_status = true;
  o.status = status.value();
  return o;
}

// What a live agent that is not ready yet is doing, as its status.json says.
std::string WhereItWaits(const WaitRequest& req, const Observation& o) {
  if (!o.have_status) return "no status in " + req.run_dir;
  if (o.status.exchange_waiting_s < 0) return "still staging";
  // The fence completes only once every node's agent has reached it and Slurm's PMIx has carried
  // every contribution around: one agent stuck or dead, or slurmstepd's PMIx failing between two
  // nodes (its errors are in slurmd's log, "mpi/pmix"), holds every node here.
  return "in the metadata exchange with the other nodes' agents for " +
         Seconds(o.status.exchange_waiting_s) +
         " s: Slurm's PMIx fence has not completed; slurmd's log on the nodes says why "
         "(mpi/pmix errors; 'Munge decode failed: Unauthorized credential' there is Slurm's race "
         "at the step's launch, and the job runs when submitted again)";
}

// The agents' own words from the launch log: its error lines if any, else its last lines.
std::string LaunchLogExcerpt(const std::string& path, uid_t owner) {
  const std::string tail = TailOfFile(path, 200, owner);
  std::vector<std::string> errors;
  size_t pos = 0;
  while (pos < tail.size()) {
    size_t end = tail.find('\n', pos);
    if (end == std::string::npos) end = tail.size();
    const std::string line = tail.substr(pos, end - pos);
    if (line.find("error") != std::string::npos || line.find("Error") != std::string::npos)
      errors.push_back(line);
    pos = end + 1;
  }
  if (errors.empty()) return TailOfFile(path, 6, owner);
  std::string out;
  for (size_t i = errors.size() > 4 ? errors.size() - 4 : 0; i < errors.size(); i++)
    out += (out.empty() ? "" : "\n") + errors[i];
  return out;
}

// Whether the helper srun has ended, without reaping it.
bool HelperEnded(pid_t helper) {
  if (helper <= 0) return false;
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(helper), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == helper;
}

// When this process started the agent step: waits up to grace_s for its srun to end, and returns "
// (how it ended); the agents said:\n<excerpt>" for the error message.
std::string HelperReport(const WaitRequest& req, double grace_s) {
  if (req.helper <= 0) return "";
  int status = 0;
  bool ended = false;
  for (double t = 0; t <= grace_s && !ended; t += kPollMs / 1000.0) {
    ended = ::waitpid(req.helper, &status, WNOHANG) == req.helper;
    if (!ended) {
      struct timespec ts = {0, kPollMs * 1000000L};
      ::nanosleep(&ts, nullptr);
    }
  }
  std::string out;
  if (ended)
    out = WIFEXITED(status)
              ? "; the agents' srun exited with status " + std::to_string(WEXITSTATUS(status))
              : "; the agents' srun was killed by signal " +
                    std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  const std::string excerpt = LaunchLogExcerpt(req.launch_log, req.uid);
  if (!excerpt.empty()) out += "; the agents said:\n" + excerpt;
  return out;
}

Status FromObservation(const WaitRequest& req, const Observation& o, bool* done) {
  *done = true;
  if (!o.problem.ok()) return o.problem;
  if (o.have_status && o.status.state == run_dir::AgentState::kReady) return Status::OK();
  if (o.have_status && o.status.state == run_dir::AgentState::kFailed)
    return Status::Aborted("the FanStore agent on " + req.node + " failed: " + o.status.error);
  // status.json cannot change when its writer dies: the lock can.
  if (o.have_status && o.status.Dead())  // or is removing its run directory as it exits
    return Status::Aborted("the FanStore agent on " + req.node + " died during stage-in" +
                           HelperReport(req, 5));
  *done = false;
  return Status::OK();
}

// squeue as the job user. Returns false when it could not tell (then we just keep waiting).
bool Squeue(const WaitRequest& req, std::vector<std::string> args, std::string* out, int* rc) {
  args.insert(args.begin(), req.squeue);
  auto r = RunCapture(args, req.squeue_env, req.creds, 10000, out);
  if (!r.ok() || r.value() < 0) return false;
  *rc = r.value();
  return true;
}

}  // namespace

Status WaitForAgent(const WaitRequest& req, double* waited_s) {
  const double start = Now();
  double next_squeue = start + kSqueueFastSeconds;
  bool seen_dir = false, seen_step = false;
  const std::string job = std::to_string(req.job);
  for (;;) {
    const double now = Now();
    *waited_s = now - start;
    Observation o = Observe(req);
    bool done = false;
    Status s = FromObservation(req, o, &done);
    if (done) return s;
    if (o.present) {
      seen_dir = true;
    } else if (seen_dir) {
      // Typically another node's agent failed and the step was ended (--kill-on-bad-exit), or the
      // job was cancelled. The batch step can quote the agents' output.
      return Status::Aborted("the FanStore agent on " + req.node +
                             " exited before it was ready (its run directory " + req.run_dir +
                             " is gone)" + HelperReport(req, 5));
    }

    if (HelperEnded(req.helper)) {
      s = FromObservation(req, Observe(req), &done);  // it may have failed with a message
      if (done) return s;
      return Status::Aborted("the agent step ended before the FanStore agent on " + req.node +
                             " was ready" + HelperReport(req, 0));
    }

    if (!req.squeue.empty() && now >= next_squeue) {
      next_squeue =
          now + (*waited_s < kSqueueFastPhaseSeconds ? kSqueueFastSeconds : kSqueueSlowSeconds);
      std::string out;
      int rc = 0;
      if (Squeue(req, {"-h", "-j", job, "-o", "%T"}, &out, &rc)) {
        while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
        if (rc != 0 || (out != "RUNNING" && out != "CONFIGURING"))
          return Status::Aborted("job " + job + " is no longer running (" +
                                 (out.empty() ? "gone" : out) +
                                 ") while waiting for the FanStore agent on " + req.node);
      }
      if (Squeue(req, {"-h", "-s", "-j", job, "-o", "%j"}, &out, &rc) && rc == 0) {
        if (out.find(kAgentStepName) != std::string::npos) {
          seen_step = true;
        } else if (seen_step || *waited_s > kAgentStepGraceSeconds) {
          s = FromObservation(req, Observe(req), &done);
          if (done) return s;
          return Status::Aborted("the FanStore agent step of job " + job +
                                 " is not running (it ended or never " +
                                 "started) while the agent on " + req.node + " was not ready");
        }
      }
    }

    if (*waited_s >= req.timeout_s) {
      return Status::Timeout("the FanStore agent on " + req.node + " was not ready after " +
                             Seconds(*waited_s) + " s (" + WhereItWaits(req, o) +
                             "); the admin's stagein_timeout is " + std::to_string(req.timeout_s) +
                             " s");
    }
    struct timespec ts = {0, kPollMs * 1000000L};
    ::nanosleep(&ts, nullptr);
  }
}

}  // namespace fanstore::spank
