// Shared plugin state and helpers (see plugin_state.h).
#include "spank-plugin/plugin_state.h"

#include "spank-plugin/options.h"

namespace fanstore::spank {
namespace {

int OptionCallback(int val, const char* optarg, int /*remote*/) noexcept {
  try {
    if (val < kOptDataset || val > kOptLast) return -1;
    Status s = SetUserOption(&State().options, static_cast<UserOption>(val),
                             optarg != nullptr ? optarg : "");
    if (!s.ok()) {
      LogError("options", s.message());
      return -1;
    }
    return 0;
  } catch (...) {
    return -1;
  }
}

std::string& MountUsage() {
  static std::string usage;
  return usage;
}
std::string& DrainUsage() {
  static std::string usage;
  return usage;
}

struct spank_option g_options[] = {
    {const_cast<char*>("fanstore"), const_cast<char*>("PATH"),
     const_cast<char*>(
         "[fanstore] serve the FanStore dataset PATH (a NAME.fs directory made by `fanstore pack`) "
         "to every task of the job"),
     1, kOptDataset, OptionCallback},
    {const_cast<char*>("fanstore-mount"), const_cast<char*>("PATH"), nullptr, 1, kOptMount,
     OptionCallback},
    {const_cast<char*>("fanstore-replicas"), const_cast<char*>("N|all"),
     const_cast<char*>(
         "[fanstore] how many nodes hold each shard: N, or all (default: 1, or the site's)"),
     1, kOptReplicas, OptionCallback},
    {const_cast<char*>("fanstore-stats"), const_cast<char*>("FILE|none"),
     const_cast<char*>(
         "[fanstore] at job end every node appends its FanStore counters to FILE (%j: job id; "
         "relative to the submit directory; default fanstore-%j.stats); `fanstore stats FILE` "
         "summarises them"),
     1, kOptStats, OptionCallback},
    {const_cast<char*>("fanstore-output"), const_cast<char*>("DIR"),
     const_cast<char*>(
         "[fanstore] tasks write to $FANSTORE_OUTPUT on node-local storage; each file, once "
         "closed, is copied to DIR (on the parallel file system) in the background, verified, "
         "never half-written; the job's end waits for it (see --fanstore-drain-timeout)"),
     1, kOptOutput, OptionCallback},
    {const_cast<char*>("fanstore-drain-timeout"), const_cast<char*>("SEC"), nullptr, 1,
     kOptDrainTimeout, OptionCallback},
    {const_cast<char*>("fanstore-unpack"), const_cast<char*>("auto|eager|lazy"),
     const_cast<char*>(
         "[fanstore] when each node's files are made: eager, before the tasks start; lazy, after "
         "(the tasks start once the shards are copied); auto (default): lazy for files under 64 "
         "KiB on average, and an image where the site mounts one"),
     1, kOptUnpack, OptionCallback},
};

}  // namespace

PluginState& State() {
  static PluginState* state = new PluginState();  // never destroyed: hooks may run during exit
  return *state;
}

int LoadConfig(int ac, char** av, const char* phase) {
  PluginState& s = State();
  if (s.config_loaded) return 0;
  std::vector<std::string> args(av, av + (ac > 0 ? ac : 0));
  auto config = ParseConfig(args);
  if (!config.ok()) {
    LogError(phase, "bad plugstack.conf arguments: " + config.status().message());
    return -1;
  }
  s.config = std::move(config.value());
  ResolveAdminSymlinks(&s.config);
  s.config_loaded = true;
  return 0;
}

int RegisterOptions(spank_t sp, const char* phase) {
  MountUsage() = "[fanstore] virtual path where the tasks see the dataset (default: " +
                 State().config.mount_prefix + "/NAME)";
  g_options[kOptMount].usage = MountUsage().data();
  DrainUsage() =
      "[fanstore] at the job's end, wait this long at most for --fanstore-output to "
      "drain (default and most: " +
      std::to_string(State().config.drain_timeout) + ", the site's bound)";
  g_options[kOptDrainTimeout].usage = DrainUsage().data();
  for (auto& opt : g_options) {
    const spank_err_t rc = spank_option_register(sp, &opt);
    if (rc != ESPANK_SUCCESS) {
      LogError(phase, std::string("cannot register --") + opt.name + ": " + spank_strerror(rc));
      return -1;
    }
  }
  return 0;
}

void LogError(const char* phase, const std::string& msg) {
  slurm_error("fanstore: %s: %s", phase, msg.c_str());
}
void LogInfo(const char* phase, const std::string& msg) {
  slurm_info("fanstore: %s: %s", phase, msg.c_str());
}
void LogVerbose(const char* phase, const std::string& msg) {
  slurm_verbose("fanstore: %s: %s", phase, msg.c_str());
}
void LogDebug(const char* phase, const std::string& msg) {
  slurm_debug("fanstore: %s: %s", phase, msg.c_str());
}

std::optional<std::string> JobGetenv(spank_t sp, const char* name) {
  std::vector<char> buf(256);
  for (;;) {
    const spank_err_t rc = spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size()));
    if (rc == ESPANK_SUCCESS) return std::string(buf.data());
    if (rc != ESPANK_NOSPACE || buf.size() > (1u << 20)) return std::nullopt;
    buf.resize(buf.size() * 4);
  }
}

std::vector<std::string> JobEnvironment(spank_t sp) {
  std::vector<std::string> out;
  char** env = nullptr;
  if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || env == nullptr) return out;
  for (char** e = env; *e != nullptr; e++) out.emplace_back(*e);
  return out;
}

Result<JobIdentity> GetJobIdentity(spank_t sp) {
  JobIdentity id;
  spank_err_t rc = spank_get_item(sp, S_JOB_ID, &id.job);
  if (rc != ESPANK_SUCCESS)
    return Status::IOError(std::string("cannot get the job id: ") + spank_strerror(rc));
  rc = spank_get_item(sp, S_JOB_UID, &id.uid);
  if (rc != ESPANK_SUCCESS)
    return Status::IOError(std::string("cannot get the job uid: ") + spank_strerror(rc));
  auto user = UserName(id.uid);
  if (!user.ok()) return user.status();
  id.user = user.value();
  auto node = NodeName();
  if (!node.ok()) return node.status();
  id.node = node.value();
  return id;
}

Result<Credentials> GetJobCredentials(spank_t sp) {
  Credentials c;
  spank_err_t rc = spank_get_item(sp, S_JOB_UID, &c.uid);
  if (rc == ESPANK_SUCCESS) rc = spank_get_item(sp, S_JOB_GID, &c.gid);
  if (rc != ESPANK_SUCCESS)
    return Status::IOError(std::string("cannot get the job's uid/gid: ") + spank_strerror(rc));
  gid_t* groups = nullptr;
  int ngroups = 0;
  if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &ngroups) == ESPANK_SUCCESS &&
      groups != nullptr)
    c.groups.assign(groups, groups + ngroups);
  if (c.groups.empty()) c.groups.push_back(c.gid);
  return c;
}

}  // namespace fanstore::spank
