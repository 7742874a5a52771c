// Pure functions of the job lifecycle (see job.h).
#include "spank-plugin/job.h"

#include "common/env.h"
#include "common/run_dir.h"
#include "common/text.h"

namespace fanstore::spank {
namespace {

constexpr char kSuffix[] = ".fs";

std::string JobPrefix(const Config& config, const JobIdentity& id) {
  return config.run_dir + "/fanstore." + std::to_string(id.uid) + "." + std::to_string(id.job);
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Splits an LD_PRELOAD value into entries (ld.so accepts ':' and ' ' as separators).
std::vector<std::string> SplitPreload(const std::string& v) {
  std::vector<std::string> out;
  for (std::string_view colon_part : Split(v, ':'))
    for (std::string_view entry : Split(colon_part, ' ')) out.emplace_back(entry);
  return out;
}

std::string JoinPreload(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ":") + p;
  return out;
}

// The agent step's task: the agent, run with this node's directories appended. An agent that dies
// after it was ready (killed, crashed) must not take the other nodes' agents with it, which
// --kill-on-bad-exit would do: their tasks go on, fetching what the dead node held from the
// dataset directory. So the wrapper reports such a death as a success; its status.json, which a
// killed agent leaves behind, says whether it had been ready, and the agent binary itself reads
// it (--read-state, common/run_dir's ReadStatus): no JSON is parsed in shell. A failure before
// that still ends the step. The TERM trap only defers the shell's exit until the agent has shut
// down cleanly.
std::string AgentWrapper() {
  const std::string run = std::string("\"$") + kEnvAgentRunDir + "\"";
  const std::string ready = run_dir::StateName(run_dir::AgentState::kReady);
  // Shell built-ins and the agent only: the user's PATH is not trusted to hold anything.
  return std::string("trap : HUP INT TERM USR2; \"$0\" \"$@\" --local-dir \"$") +
         kEnvAgentLocalDir + "\" --run-dir " + run +
         "; rc=$?; [ $rc -ne 0 ] && [ \"$(\"$0\" --read-state " + run +
         " 2>/dev/null)\" = " + ready +
         " ] && { echo \"fanstore: this agent ended (status $rc) after it was ready; the other "
         "agents go on\" >&2; exit 0; }; exit $rc";
}

}  // namespace

Status CheckUserOptions(const UserOptions& opts) {
  if (opts.dataset.empty()) return Status::OK();
  if (!IsCleanAbsolutePath(opts.dataset))
    return Status::InvalidArgument(
        "--fanstore=" + opts.dataset +
        ": the dataset must be given as an absolute path (e.g. --fanstore=$PWD/" + opts.dataset +
        ")");
  if (!opts.mount.empty() && !IsCleanAbsolutePath(opts.mount))
    return Status::InvalidArgument("--fanstore-mount=" + opts.mount +
                                   ": must be a clean absolute path, not /");
  if (!opts.replicas.empty() && !IsValidReplicas(opts.replicas))
    return Status::InvalidArgument("--fanstore-replicas=" + opts.replicas +
                                   ": must be 'all' or a number from 1 to 65535");
  if (!opts.stats.empty() && opts.stats.back() == '/')
    return Status::InvalidArgument("--fanstore-stats=" + opts.stats +
                                   ": must name a file, or be 'none'");
  return DatasetName(opts.dataset).status();
}

Result<std::string> DatasetName(const std::string& dataset) {
  const size_t slash = dataset.rfind('/');
  std::string name = slash == std::string::npos ? dataset : dataset.substr(slash + 1);
  const size_t n = sizeof(kSuffix) - 1;
  if (name.size() >= n && name.compare(name.size() - n, n, kSuffix) == 0)
    name.resize(name.size() - n);
  if (name.empty() || name == "." || name == "..")
    return Status::InvalidArgument("--fanstore=" + dataset +
                                   ": cannot derive a mount name from it; use --fanstore-mount");
  return name;
}

Result<std::string> ResolveMount(const UserOptions& opts, const Config& config) {
  if (!opts.mount.empty()) return opts.mount;
  auto name = DatasetName(opts.dataset);
  if (!name.ok()) return name.status();
  return config.mount_prefix + "/" + name.value();
}

std::string ResolveReplicas(const UserOptions& opts, const Config& config) {
  return opts.replicas.empty() ? config.replicas : opts.replicas;
}

std::string ExpandTemplate(const std::string& tmpl, const JobIdentity& id) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); i++) {
    if (tmpl[i] != '%' || i + 1 == tmpl.size()) {
      out += tmpl[i];
      continue;
    }
    switch (tmpl[++i]) {
      case 'n':
        out += id.node;
        break;
      case 'j':
        out += std::to_string(id.job);
        break;
      case 'u':
        out += id.user;
        break;
      case '%':
        out += '%';
        break;
      default:
        out += '%';
        out += tmpl[i];
        break;  // ParseConfig rejects these
    }
  }
  return out;
}

std::string TemplateBeforeJob(const std::string& tmpl) {
  for (size_t i = 0; i + 1 < tmpl.size(); i++) {
    if (tmpl[i] != '%') continue;
    if (tmpl[i + 1] != 'j') {
      i++;  // %%, %n, %u: a '%' that follows is not a sequence of its own
      continue;
    }
    const size_t slash = tmpl.rfind('/', i);
    return slash == std::string::npos ? "" : slash == 0 ? "/" : tmpl.substr(0, slash);
  }
  return tmpl;
}

bool IsSafeNodeName(const std::string& node) {
  return !node.empty() && node != "." && node != ".." && node.find('/') == std::string::npos &&
         node.find('\0') == std::string::npos;
}

std::string RunDir(const Config& config, const JobIdentity& id) {
  return JobPrefix(config, id) + "." + id.node;
}
std::string LaunchDir(const Config& config, const JobIdentity& id) {
  return config.run_dir + "/fanstore." + std::to_string(id.uid);
}
std::string LaunchLog(const Config& config, const JobIdentity& id) {
  return LaunchDir(config, id) + "/" + std::to_string(id.job) + ".launch.log";
}
std::string LaunchLock(const Config& config, const JobIdentity& id) {
  return LaunchDir(config, id) + "/" + std::to_string(id.job) + ".launch";
}

std::string LocalDir(const Config& config, const JobIdentity& id) {
  return ExpandTemplate(config.local_dir, id) + "/fanstore." + std::to_string(id.uid) + "." +
         std::to_string(id.job);
}

std::vector<std::string> AgentStepArgv(const AgentStep& s) {
  const std::string nodes = std::to_string(s.nodes);
  std::vector<std::string> argv = {
      s.srun,
      "--jobid=" + std::to_string(s.job),
      "--overlap",  // share the CPUs of the user's steps
      "--nodes=" + nodes,
      "--ntasks=" + nodes,
      "--ntasks-per-node=1",
      "--cpus-per-task=1",
      "--mpi=pmix",    // the agents bootstrap through the step's PMIx server
      "--export=ALL",  // whatever SLURM_EXPORT_ENV says: the agents need FANSTORE_AGENT_STEP
      "--job-name=" + std::string(kAgentStepName),
      "--kill-on-bad-exit=1",  // an agent that fails before it is ready ends the step: no peer
                               // waits in a fence
      "--input=none",
      "--chdir=/",  // not the launcher's directory, which the user may not be able to enter
      "--label",
      "/bin/sh",
      "-c",
      AgentWrapper(),
      s.agent,
      "--dataset",
      s.dataset,
      "--mount",
      s.mount,
      "--job-id",
      std::to_string(s.job),
      "--bootstrap",
      "pmix",
  };
  if (s.job_fs) argv.push_back("--epilog-unmounts-local-dir");
  if (!s.replicas.empty()) {
    argv.push_back("--replicas");
    argv.push_back(s.replicas);
  }
  if (!s.cache_size.empty()) {
    argv.push_back("--cache-size");
    argv.push_back(s.cache_size);
  }
  if (!s.stats_out.empty()) {
    argv.push_back("--stats-out");
    argv.push_back(s.stats_out);
  }
  return argv;
}

std::string ResolveStatsFile(const UserOptions& opts, uint32_t job, const std::string& submit_dir) {
  if (opts.stats == "none") return "";
  const std::string tmpl = opts.stats.empty() ? kDefaultStatsFile : opts.stats;
  std::string path;
  for (size_t i = 0; i < tmpl.size(); i++) {
    if (tmpl[i] == '%' && i + 1 < tmpl.size() && tmpl[i + 1] == 'j') {
      path += std::to_string(job);
      i++;
    } else {
      path += tmpl[i];
    }
  }
  if (path.front() == '/') return path;
  return submit_dir.empty() || submit_dir.front() != '/' ? "" : submit_dir + "/" + path;
}

Result<AgentStep> MakeAgentStep(const Config& config, const UserOptions& opts, uint32_t job,
                                uint32_t nodes, const std::string& submit_dir) {
  auto mount = ResolveMount(opts, config);
  if (!mount.ok()) return mount.status();
  if (nodes == 0) return Status::InvalidArgument("job " + std::to_string(job) + " has no nodes");
  AgentStep step;
  step.srun = config.srun;
  step.agent = config.agent;
  step.dataset = opts.dataset;
  step.mount = mount.value();
  step.replicas = ResolveReplicas(opts, config);
  step.stats_out = ResolveStatsFile(opts, job, submit_dir);
  step.cache_size = config.cache_size;
  step.job_fs = config.job_fs;
  step.job = job;
  step.nodes = nodes;
  return step;
}

std::vector<std::string> AgentStepEnv(const std::vector<std::string>& env,
                                      const std::string& preload) {
  std::vector<std::string> out;
  const std::string drop[] = {std::string(env::kMount) + "=",   std::string(env::kTable) + "=",
                              std::string(env::kSocket) + "=",  std::string(env::kDisable) + "=",
                              std::string(kEnvAgentStep) + "=", std::string(kEnvJobAgents) + "="};
  const std::string ld_preload = std::string(env::kLdPreload) + "=";
  for (const auto& e : env) {
    bool skip = e.find(kOptionEnvMarker) != std::string::npos;
    for (const auto& d : drop) skip = skip || StartsWith(e, d.c_str());
    if (skip) continue;
    if (StartsWith(e, ld_preload.c_str())) {
      const std::string rest = RemovePreload(e.substr(ld_preload.size()), preload);
      if (!rest.empty()) out.push_back(ld_preload + rest);
      continue;
    }
    out.push_back(e);
  }
  out.push_back(std::string(kEnvAgentStep) + "=1");
  out.push_back(std::string(env::kDisable) + "=1");
  return out;
}

std::string PrependPreload(const std::string& current, const std::string& preload) {
  std::vector<std::string> parts = {preload};
  for (auto& p : SplitPreload(current))
    if (p != preload) parts.push_back(p);
  return JoinPreload(parts);
}

std::string RemovePreload(const std::string& current, const std::string& preload) {
  std::vector<std::string> parts;
  for (auto& p : SplitPreload(current))
    if (p != preload) parts.push_back(p);
  return JoinPreload(parts);
}

}  // namespace fanstore::spank
