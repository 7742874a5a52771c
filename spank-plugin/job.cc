// Pure functions of the job lifecycle (see job.h).
#include "spank-plugin/job.h"

#include "common/env.h"
#include "common/run_dir.h"
#include "common/text.h"
#include "output/drainer.h"

#include <cstring>

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
std::string AgentWrapper(bool output) {
  const std::string run = std::string("\"$") + kEnvAgentRunDir + "\"";
  const std::string out =
      output ? std::string(" --output-dir \"$") + env::kAgentOutputDir + "\"" : "";
  const std::string ready = run_dir::StateName(run_dir::AgentState::kReady);
  // Shell built-ins and the agent only: the user's PATH is not trusted to hold anything.
  return std::string("trap : HUP INT TERM USR2; \"$0\" \"$@\" --local-dir \"$") +
         kEnvAgentLocalDir + "\" --run-dir " + run + out +
         "; rc=$?; [ $rc -ne 0 ] && [ \"$(\"$0\" --read-state " + run +
         " 2>/dev/null)\" = " + ready +
         " ] && { echo \"fanstore: this agent ended (status $rc) after it was ready; the other "
         "agents go on\" >&2; exit 0; }; exit $rc";
}

bool IsPmixFence(const std::string& v) { return v == "tree" || v == "ring" || v == "mixed"; }

}  // namespace

Status CheckUserOptions(const UserOptions& opts, const Config& config) {
  if (!opts.drain_timeout.empty() && opts.output.empty())
    return Status::InvalidArgument("--fanstore-drain-timeout=" + opts.drain_timeout +
                                   " needs --fanstore-output");
  if (!opts.output.empty() && !IsCleanAbsolutePath(opts.output))
    return Status::InvalidArgument("--fanstore-output=" + opts.output +
                                   ": must be a clean absolute path, not /");
  FS_RETURN_IF_ERROR(ResolveDrainTimeout(opts, config).status());
  if (opts.dataset.empty()) {
    for (const auto& [set, name] : {std::pair{!opts.mount.empty(), "--fanstore-mount"},
                                    std::pair{!opts.replicas.empty(), "--fanstore-replicas"},
                                    std::pair{!opts.unpack.empty(), "--fanstore-unpack"}})
      if (set)
        return Status::InvalidArgument(std::string(name) + " needs a dataset (--fanstore=DS.fs)");
    return Status::OK();
  }
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
  if (!opts.unpack.empty() && !IsOneOf(opts.unpack, kUnpackModes))
    return Status::InvalidArgument("--fanstore-unpack=" + opts.unpack + ": must be " +
                                   ListWords(kUnpackModes));
  if (!opts.stats.empty() && opts.stats.back() == '/')
    return Status::InvalidArgument("--fanstore-stats=" + opts.stats +
                                   ": must name a file, or be 'none'");
  return DatasetName(opts.dataset).status();
}

Result<int> ResolveDrainTimeout(const UserOptions& opts, const Config& config) {
  if (opts.drain_timeout.empty()) return config.drain_timeout;
  const auto secs = ParseInt(opts.drain_timeout, 0, config.drain_timeout);
  if (!secs)
    return Status::InvalidArgument("--fanstore-drain-timeout=" + opts.drain_timeout +
                                   ": must be seconds from 0 to " +
                                   std::to_string(config.drain_timeout) + " (this site's bound)");
  return static_cast<int>(*secs);
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
std::string OutputDir(const Config& config, const JobIdentity& id) {
  return LocalDir(config, id) + ".output";
}
std::vector<std::string> JobDirs(const Config& config, const JobIdentity& id, bool dataset,
                                 bool output) {
  std::vector<std::string> dirs = {LaunchDir(config, id), RunDir(config, id)};
  if (dataset) dirs.push_back(LocalDir(config, id));
  if (output) dirs.push_back(OutputDir(config, id));
  return dirs;
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
      AgentWrapper(!s.output.empty()),
      s.agent,
      "--job-id",
      std::to_string(s.job),
      "--bootstrap",
      "pmix",
  };
  for (const auto& [flag, value] :
       {std::pair{"--dataset", s.dataset}, std::pair{"--mount", s.mount},
        std::pair{"--output", s.output}, std::pair{"--unpack", s.unpack}})
    if (!value.empty()) argv.insert(argv.end(), {flag, value});
  if (!s.output.empty())
    argv.insert(argv.end(), {"--drain-timeout", std::to_string(s.drain_timeout)});
  if (s.job_fs && !s.dataset.empty()) argv.push_back("--epilog-unmounts-local-dir");
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
  Result<std::string> mount = std::string();
  if (!opts.dataset.empty()) mount = ResolveMount(opts, config);
  if (!mount.ok()) return mount.status();
  auto drain = ResolveDrainTimeout(opts, config);
  if (!drain.ok()) return drain.status();
  if (nodes == 0) return Status::InvalidArgument("job " + std::to_string(job) + " has no nodes");
  AgentStep step;
  step.output = opts.output;
  step.drain_timeout = drain.value();
  step.srun = config.srun;
  step.agent = config.agent;
  step.dataset = opts.dataset;
  step.mount = mount.value();
  step.replicas = ResolveReplicas(opts, config);
  step.stats_out = ResolveStatsFile(opts, job, submit_dir);
  step.cache_size = config.cache_size;
  step.unpack = opts.unpack;
  step.job_fs = config.job_fs;
  step.job = job;
  step.nodes = nodes;
  return step;
}

std::vector<std::string> OutputReportLines(const std::string& log, size_t max_lines) {
  constexpr size_t kMaxLine = 400;
  const std::string tag = "fanstore-agent[";
  std::vector<std::string> out;
  for (std::string_view line : Split(log, '\n')) {
    const size_t start = line.find(tag);
    const size_t end = start == std::string_view::npos ? start : line.find("]: ", start);
    if (end == std::string_view::npos) continue;
    std::string_view rest = line.substr(end + 3);
    for (std::string_view level : {"error: ", "warning: "})
      if (rest.substr(0, level.size()) == level) rest.remove_prefix(level.size());
    if (rest.substr(0, std::strlen(output::kReportTag)) != output::kReportTag) continue;
    std::string kept(line.substr(start, kMaxLine));
    for (char& c : kept)  // plain ASCII only: no terminal codes, 8-bit ones (0x9b) included
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    out.push_back(std::move(kept));
  }
  if (out.size() > max_lines) out.erase(out.begin(), out.end() - static_cast<long>(max_lines));
  return out;
}

std::vector<std::string> AgentStepEnv(const std::vector<std::string>& env,
                                      const std::string& preload) {
  std::vector<std::string> out;
  const std::string drop[] = {std::string(env::kMount) + "=",   std::string(env::kTable) + "=",
                              std::string(env::kSocket) + "=",  std::string(env::kDisable) + "=",
                              std::string(kEnvAgentStep) + "=", std::string(kEnvJobAgents) + "="};
  const std::string ld_preload = std::string(env::kLdPreload) + "=";
  const std::string fence = std::string(env::kSlurmPmixFence) + "=";
  const std::string gds = std::string(env::kPmixMcaGds) + "=";
  const std::string asked = std::string(env::kPmixFence) + "=";
  std::string fence_value = kAgentPmixFence;
  for (const auto& e : env) {
    bool skip = e.find(kOptionEnvMarker) != std::string::npos || StartsWith(e, fence.c_str()) ||
                StartsWith(e, gds.c_str());
    for (const auto& d : drop) skip = skip || StartsWith(e, d.c_str());
    if (StartsWith(e, asked.c_str()) && IsPmixFence(e.substr(asked.size())))
      fence_value = e.substr(asked.size());
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
  out.push_back(fence + fence_value);
  out.push_back(gds + kAgentPmixGds);
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
