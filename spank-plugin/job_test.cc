// Unit tests of the job lifecycle's pure functions: paths, the agent step's command and
// environment, LD_PRELOAD editing and status.json.
#include "spank-plugin/job.h"
#include "common/testing/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace fanstore::spank {
namespace {

using ::testing::Contains;
using ::testing::Not;

JobIdentity Alice() {
  JobIdentity id;
  id.job = 42;
  id.uid = 1001;
  id.user = "alice";
  id.node = "node3";
  return id;
}

Config TestConfig() {
  Config c = DefaultConfig();
  c.local_dir = "/scratch/%u/%n";
  return c;
}

TEST(JobTest, DatasetNameAndMount) {
  EXPECT_EQ(DatasetName("/pfs/imagenet.fs").value(), "imagenet");
  EXPECT_EQ(DatasetName("/pfs/imagenet").value(), "imagenet");
  EXPECT_EQ(DatasetName("/pfs/a.fs.fs").value(), "a.fs");
  EXPECT_FALSE(DatasetName("/pfs/.fs").ok());
  UserOptions o;
  o.dataset = "/pfs/imagenet.fs";
  EXPECT_EQ(ResolveMount(o, TestConfig()).value(), "/fanstore/imagenet");
  o.mount = "/data/in";
  EXPECT_EQ(ResolveMount(o, TestConfig()).value(), "/data/in");
}

TEST(JobTest, UserOptionChecks) {
  UserOptions o;
  EXPECT_TRUE(CheckUserOptions(o, DefaultConfig()).ok());  // not used
  o.dataset = "ds.fs";
  auto s = CheckUserOptions(o, DefaultConfig());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("absolute"), std::string::npos);
  o.dataset = "/pfs/ds.fs";
  EXPECT_TRUE(CheckUserOptions(o, DefaultConfig()).ok());
  o.mount = "/";
  EXPECT_FALSE(CheckUserOptions(o, DefaultConfig()).ok());
  o.mount = "/m";
  o.replicas = "x";
  EXPECT_NE(CheckUserOptions(o, DefaultConfig()).message().find("--fanstore-replicas=x"),
            std::string::npos);
  o.replicas = "3";
  EXPECT_TRUE(CheckUserOptions(o, DefaultConfig()).ok());
  o.unpack = "later";
  EXPECT_EQ(CheckUserOptions(o, DefaultConfig()).message(),
            "--fanstore-unpack=later: must be auto, eager or lazy");
  for (const char* mode : {"auto", "eager", "lazy"}) {
    o.unpack = mode;
    EXPECT_TRUE(CheckUserOptions(o, DefaultConfig()).ok()) << mode;
  }
  o.dataset.clear();  // an output-only job unpacks nothing
  EXPECT_EQ(CheckUserOptions(o, DefaultConfig()).message(),
            "--fanstore-mount needs a dataset (--fanstore=DS.fs)");
  o.mount.clear();
  o.replicas.clear();
  o.output = "/pfs/out";
  EXPECT_EQ(CheckUserOptions(o, DefaultConfig()).message(),
            "--fanstore-unpack needs a dataset (--fanstore=DS.fs)");
}

TEST(JobTest, TheUsersUnpackModeReachesTheAgents) {
  UserOptions o;
  o.dataset = "/pfs/ds.fs";
  auto argv = AgentStepArgv(MakeAgentStep(TestConfig(), o, 9, 2, "").value());
  EXPECT_THAT(argv, Not(Contains(std::string("--unpack"))));  // the agent's own default
  o.unpack = "eager";
  argv = AgentStepArgv(MakeAgentStep(TestConfig(), o, 9, 2, "").value());
  const auto it = std::find(argv.begin(), argv.end(), "--unpack");
  ASSERT_NE(it, argv.end());
  EXPECT_EQ(it[1], "eager");
}

TEST(JobTest, OutputOptionChecks) {
  Config c = DefaultConfig();
  c.drain_timeout = 600;
  UserOptions o;
  o.output = "/pfs/run42";
  EXPECT_TRUE(o.used());
  EXPECT_TRUE(CheckUserOptions(o, c).ok());           // output only
  EXPECT_EQ(ResolveDrainTimeout(o, c).value(), 600);  // the site's bound is the default
  o.drain_timeout = "60";
  EXPECT_EQ(ResolveDrainTimeout(o, c).value(), 60);  // users may lower it
  o.drain_timeout = "601";                           // but not raise it
  auto above = CheckUserOptions(o, c);
  ASSERT_FALSE(above.ok());
  EXPECT_NE(above.message().find("--fanstore-drain-timeout=601"), std::string::npos);
  EXPECT_NE(above.message().find("600"), std::string::npos) << above.message();
  o.drain_timeout = "ten";
  EXPECT_FALSE(CheckUserOptions(o, c).ok());
  o.output = "";
  o.drain_timeout = "5";  // a bound on nothing
  EXPECT_NE(CheckUserOptions(o, c).message().find("needs --fanstore-output"), std::string::npos);
  o.drain_timeout = "";
  o.output = "run42";
  EXPECT_NE(CheckUserOptions(o, c).message().find("--fanstore-output=run42"), std::string::npos);
  o.output = "/pfs/run42";
  o.mount = "/data";  // a mount without a dataset means nothing
  EXPECT_NE(CheckUserOptions(o, c).message().find("--fanstore-mount needs a dataset"),
            std::string::npos);
}

TEST(JobTest, ReplicasFromUserThenAdmin) {
  UserOptions o;
  Config c = TestConfig();
  EXPECT_EQ(ResolveReplicas(o, c), "1");  // the plugin's default: split, one copy of each shard
  c.replicas = "2";
  EXPECT_EQ(ResolveReplicas(o, c), "2");
  o.replicas = "all";
  EXPECT_EQ(ResolveReplicas(o, c), "all");
}

TEST(JobTest, TemplateAndPaths) {
  const JobIdentity id = Alice();
  EXPECT_EQ(ExpandTemplate("/l/%n/%j/%u/100%%", id), "/l/node3/42/alice/100%");
  EXPECT_EQ(TemplateBeforeJob("/l/%u/%j/x"), "/l/%u");
  EXPECT_EQ(TemplateBeforeJob("/l/%u/job%j"), "/l/%u");
  EXPECT_EQ(TemplateBeforeJob("/%j"), "/");
  EXPECT_EQ(TemplateBeforeJob("/l/%n/%u"), "/l/%n/%u");        // no job part: all of it
  EXPECT_EQ(TemplateBeforeJob("/l/100%%j/x"), "/l/100%%j/x");  // "%%j" is '%' and 'j'
  EXPECT_EQ(TemplateBeforeJob("/l/100%%%j"), "/l");
  const Config c = TestConfig();
  EXPECT_EQ(RunDir(c, id), "/dev/shm/fanstore.1001.42.node3");
  EXPECT_EQ(LocalDir(c, id), "/scratch/alice/node3/fanstore.1001.42");
  EXPECT_EQ(LaunchLog(c, id), "/dev/shm/fanstore.1001/42.launch.log");
  EXPECT_EQ(LaunchLock(c, id), "/dev/shm/fanstore.1001/42.launch");
  EXPECT_TRUE(IsSafeNodeName("node3"));
  EXPECT_FALSE(IsSafeNodeName(""));
  EXPECT_FALSE(IsSafeNodeName(".."));
  EXPECT_FALSE(IsSafeNodeName("a/b"));
}

TEST(JobTest, AgentStepCommand) {
  AgentStep s;
  s.srun = "/usr/bin/srun";
  s.agent = "/opt/bin/fanstore-agent";
  s.dataset = "/pfs/ds.fs";
  s.mount = "/fanstore/ds";
  s.job = 7;
  s.nodes = 4;
  auto argv = AgentStepArgv(s);
  EXPECT_EQ(argv[0], "/usr/bin/srun");
  for (const char* want :
       {"--jobid=7", "--overlap", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "--mpi=pmix",
        "--export=ALL", "/opt/bin/fanstore-agent", "/pfs/ds.fs", "/fanstore/ds"})
    EXPECT_THAT(argv, Contains(std::string(want)));
  EXPECT_THAT(argv, Not(Contains(std::string("--replicas"))));
  // The shell appends the node's directories and runs the agent (see
  // AgentWrapperKeepsPeersOfADeadAgent).
  const auto sh = std::find(argv.begin(), argv.end(), "-c");
  ASSERT_NE(sh, argv.end());
  EXPECT_NE(sh[1].find("\"$0\" \"$@\" --local-dir"), std::string::npos);
  EXPECT_NE(sh[1].find("$FANSTORE_AGENT_LOCAL_DIR"), std::string::npos);
  EXPECT_EQ(sh[2], "/opt/bin/fanstore-agent");
  s.replicas = "2";
  argv = AgentStepArgv(s);
  EXPECT_EQ(argv[argv.size() - 2], "--replicas");
  EXPECT_EQ(argv.back(), "2");
}

TEST(JobTest, AgentStepWithOutput) {
  Config c = TestConfig();
  UserOptions o;
  o.output = "/pfs/run42";
  o.drain_timeout = "30";
  auto s = MakeAgentStep(c, o, 9, 2, "");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto argv = AgentStepArgv(*s);
  // Output only: no dataset, mount or tmpfs for it; the output and its bound.
  for (const char* absent : {"--dataset", "--mount", "--epilog-unmounts-local-dir"})
    EXPECT_THAT(argv, Not(Contains(std::string(absent))));
  const auto out = std::find(argv.begin(), argv.end(), "--output");
  ASSERT_NE(out, argv.end());
  EXPECT_EQ(out[1], "/pfs/run42");
  const auto bound = std::find(argv.begin(), argv.end(), "--drain-timeout");
  ASSERT_NE(bound, argv.end());
  EXPECT_EQ(bound[1], "30");
  const auto sh = std::find(argv.begin(), argv.end(), "-c");
  EXPECT_NE(sh[1].find("--output-dir \"$FANSTORE_AGENT_OUTPUT_DIR\""), std::string::npos);
  // With a dataset too: both.
  o.dataset = "/pfs/ds.fs";
  argv = AgentStepArgv(MakeAgentStep(c, o, 9, 2, "").value());
  EXPECT_THAT(argv, Contains(std::string("--dataset")));
  EXPECT_THAT(argv, Contains(std::string("--output")));
  // Without output, the shell passes no output directory.
  o.output.clear();
  argv = AgentStepArgv(MakeAgentStep(c, o, 9, 2, "").value());
  EXPECT_THAT(argv, Not(Contains(std::string("--output"))));
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "-c")[1].find("--output-dir"), std::string::npos);
}

TEST(JobTest, OutputDirAndTheDirectoriesTheJobNeeds) {
  const Config c = TestConfig();
  const JobIdentity id = Alice();
  EXPECT_EQ(OutputDir(c, id), "/scratch/alice/node3/fanstore.1001.42.output");
  EXPECT_EQ(JobDirs(c, id, true, false).size(), 3u);
  EXPECT_THAT(JobDirs(c, id, false, true), Contains(OutputDir(c, id)));
  EXPECT_THAT(JobDirs(c, id, false, true), Not(Contains(LocalDir(c, id))));
  EXPECT_EQ(JobDirs(c, id, true, true).size(), 4u);
}

TEST(JobTest, OutputReportLinesFromTheLaunchLog) {
  const std::string log =
      "0: fanstore-agent[n1]: ready: output only\n"
      "1: fanstore-agent[n2]: output: 3 file(s), 1.0 KiB, drained to /pfs/r\n"
      "0: fanstore-agent[n1]: error: output: 1 file(s) did not reach /pfs/r within 5 s; ...\n"
      "0: fanstore-agent[n1]: error: output:   ckpt.pt: No space left\x1b[31m\x9b\n"
      "output: planted without a tag\n"
      "0: fanstore-agent[n1]: warning: outputs are not this\n";
  const auto lines = OutputReportLines(log, 10);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "fanstore-agent[n2]: output: 3 file(s), 1.0 KiB, drained to /pfs/r");
  EXPECT_EQ(lines[2], "fanstore-agent[n1]: error: output:   ckpt.pt: No space left?[31m?");
  EXPECT_EQ(OutputReportLines(log, 1).size(), 1u);  // the last ones
  EXPECT_EQ(
      OutputReportLines(
          std::string(1000, 'x') + "fanstore-agent[n]: output: " + std::string(1000, 'y'), 5)[0]
          .size(),
      400u);
}

TEST(JobTest, AgentStepFromOptionsAndConfig) {
  Config c = TestConfig();
  c.replicas = "2";
  UserOptions o;
  o.dataset = "/pfs/ds.fs";
  auto s = MakeAgentStep(c, o, 9, 3, "");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->mount, "/fanstore/ds");
  EXPECT_EQ(s->replicas, "2");
  EXPECT_EQ(s->agent, c.agent);
  EXPECT_EQ(s->srun, c.srun);
  EXPECT_EQ(s->nodes, 3u);
  EXPECT_FALSE(MakeAgentStep(c, o, 9, 0, "").ok());
}

// The agent step's shell, run with a stand-in agent that writes STATE to status.json, as the agent
// lays it out, and exits with RC: returns the shell's exit status.
int RunWrapper(const std::string& dir, const std::string& state, int rc) {
  AgentStep s;
  s.srun = "/usr/bin/srun";
  s.agent = dir + "/agent";
  s.dataset = "/pfs/ds.fs";
  s.mount = "/fanstore/ds";
  s.job = 7;
  s.nodes = 2;
  const auto argv = AgentStepArgv(s);
  const auto sh = std::find(argv.begin(), argv.end(), "-c");
  // Its --read-state is the real agent's: the shell must understand what the agent answers.
  std::ofstream(dir + "/agent")
      << "#!/bin/sh\n[ \"$1\" = --read-state ] && exec " FANSTORE_AGENT_BIN " \"$@\"\n"
      << "mkdir -p \"$FANSTORE_AGENT_RUN_DIR\"\n"
      << (state.empty() ? ""
                        : "echo '{\"mount\":\"/fanstore/ds\",\"pid\":1,\"state\":\"" + state +
                              "\",\"unpacked\":true}' > \"$FANSTORE_AGENT_RUN_DIR/status.json\"\n")
      << "exit " << rc << "\n";
  if (::chmod((dir + "/agent").c_str(), 0700) != 0) return -1;
  ::setenv("FANSTORE_AGENT_RUN_DIR", (dir + "/run").c_str(), 1);
  ::setenv("FANSTORE_AGENT_LOCAL_DIR", (dir + "/local").c_str(), 1);
  std::vector<char*> args;
  for (auto it = sh - 1; it != argv.end(); ++it) args.push_back(const_cast<char*>(it->c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv("/bin/sh", args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::system(("rm -rf '" + dir + "/run'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(JobTest, AgentWrapperKeepsPeersOfADeadAgent) {
  test::TempDir tmp("job-test");
  const std::string& dir = tmp.path();
  // Killed (or crashed) after it was ready: reported as success, so --kill-on-bad-exit spares the
  // peers.
  EXPECT_EQ(RunWrapper(dir, "ready", 137), 0);
  // Before it was ready, or failed: the status stays, and the step ends (no peer waits in a fence).
  EXPECT_EQ(RunWrapper(dir, "staging", 137), 137);
  EXPECT_EQ(RunWrapper(dir, "failed", 1), 1);
  EXPECT_EQ(RunWrapper(dir, "", 3), 3);
  EXPECT_EQ(RunWrapper(dir, "ready", 0), 0);
}

TEST(JobTest, AgentStepSplitsByDefault) {
  UserOptions o;
  o.dataset = "/pfs/ds.fs";
  o.stats = "none";
  auto s = MakeAgentStep(TestConfig(), o, 9, 3, "/home/u");
  ASSERT_TRUE(s.ok());
  const auto argv = AgentStepArgv(s.value());
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[argv.size() - 2], "--replicas");
  EXPECT_EQ(argv.back(), "1");
  o.replicas = "all";
  s = MakeAgentStep(TestConfig(), o, 9, 3, "/home/u");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(AgentStepArgv(s.value()).back(), "all");
}

TEST(JobTest, StatsFileDefaultsToTheSubmitDirectory) {
  UserOptions o;
  o.dataset = "/pfs/ds.fs";
  EXPECT_EQ(ResolveStatsFile(o, 42, "/home/u/run"), "/home/u/run/fanstore-42.stats");
  EXPECT_EQ(ResolveStatsFile(o, 42, ""), "");  // relative without a submit directory: none
  o.stats = "out/%j-%x.json";
  EXPECT_EQ(ResolveStatsFile(o, 42, "/home/u"), "/home/u/out/42-%x.json");
  o.stats = "/scratch/s.%j";
  EXPECT_EQ(ResolveStatsFile(o, 7, ""), "/scratch/s.7");
  Config c = TestConfig();
  c.cache_size = "20G";
  auto s = MakeAgentStep(c, o, 7, 2, "/home/u");
  ASSERT_TRUE(s.ok());
  const auto argv = AgentStepArgv(s.value());
  EXPECT_EQ(argv[argv.size() - 2], "--stats-out");
  EXPECT_EQ(argv.back(), "/scratch/s.7");
  EXPECT_EQ(argv[argv.size() - 4], "--cache-size");  // the site's cache_size= reaches the agents
  EXPECT_EQ(argv[argv.size() - 3], "20G");
  // local_fs=auto (the default): the agents leave a per-job tmpfs to the epilog; dir: never.
  auto has_flag = [](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), "--epilog-unmounts-local-dir") != v.end();
  };
  EXPECT_TRUE(has_flag(argv));
  c.job_fs = false;
  EXPECT_FALSE(has_flag(AgentStepArgv(MakeAgentStep(c, o, 7, 2, "/home/u").value())));
  o.stats = "none";
  EXPECT_EQ(ResolveStatsFile(o, 7, "/home/u"), "");
  o.stats = "dir/";
  EXPECT_FALSE(CheckUserOptions(o, DefaultConfig()).ok());
}

TEST(JobTest, AgentStepEnvironmentIsClean) {
  const std::string lib = "/opt/lib/libfanstore_preload.so";
  auto env = AgentStepEnv(
      {"PATH=/bin", "LD_PRELOAD=" + lib + ":/x/other.so", "FANSTORE_MOUNT=/fanstore/ds",
       "FANSTORE_TABLE=/dev/shm/t", "FANSTORE_SOCKET=/dev/shm/s", "FANSTORE_JOB_AGENTS=7",
       "SLURM_SPANK__SLURM_SPANK_OPTION_fanstore_fanstore=/pfs/ds.fs",
       "_SLURM_SPANK_OPTION_fanstore_fanstore_mount=/m", "FANSTORE_DISABLE=0", "SLURM_JOB_ID=7"},
      lib);
  EXPECT_THAT(env, Contains(std::string("PATH=/bin")));
  EXPECT_THAT(env, Contains(std::string("SLURM_JOB_ID=7")));
  EXPECT_THAT(env, Contains(std::string("LD_PRELOAD=/x/other.so")));
  EXPECT_THAT(env, Contains(std::string("FANSTORE_AGENT_STEP=1")));
  EXPECT_THAT(env, Contains(std::string("FANSTORE_DISABLE=1")));
  for (const auto& e : env) {
    EXPECT_EQ(e.find("SPANK_OPTION"), std::string::npos) << e;
    EXPECT_EQ(e.find(lib), std::string::npos) << e;
    EXPECT_NE(e, "FANSTORE_DISABLE=0");
    EXPECT_NE(e.rfind("FANSTORE_MOUNT=", 0), 0u) << e;
  }
  env = AgentStepEnv({"LD_PRELOAD=" + lib}, lib);
  for (const auto& e : env) EXPECT_NE(e.rfind("LD_PRELOAD=", 0), 0u) << e;
}

TEST(JobTest, AgentStepFenceIsOursUnlessTheJobAsksForOne) {
  auto fences = [](const std::vector<std::string>& env) {
    std::vector<std::string> f;
    for (const auto& e : env)
      if (e.rfind("SLURM_PMIX_FENCE=", 0) == 0) f.push_back(e);
    return f;
  };
  const std::string ours = std::string("SLURM_PMIX_FENCE=") + kAgentPmixFence;
  // The user's own MPI steps may want tree; the agents' step gets the one that works for them.
  EXPECT_EQ(fences(AgentStepEnv({"SLURM_PMIX_FENCE=tree"}, "/l.so")), std::vector{ours});
  EXPECT_EQ(fences(AgentStepEnv({}, "/l.so")), std::vector{ours});
  EXPECT_EQ(fences(AgentStepEnv({"FANSTORE_PMIX_FENCE=mixed"}, "/l.so")),
            std::vector<std::string>{"SLURM_PMIX_FENCE=mixed"});
  EXPECT_EQ(fences(AgentStepEnv({"FANSTORE_PMIX_FENCE=bogus"}, "/l.so")), std::vector{ours});
}

TEST(JobTest, AgentStepPmixStoreIsHashWhateverTheJobSays) {
  for (const std::vector<std::string>& job :
       {std::vector<std::string>{}, std::vector<std::string>{"PMIX_MCA_gds=ds21"}}) {
    std::vector<std::string> gds;
    for (const auto& e : AgentStepEnv(job, "/l.so"))
      if (e.rfind("PMIX_MCA_gds=", 0) == 0) gds.push_back(e);
    EXPECT_EQ(gds, std::vector<std::string>{"PMIX_MCA_gds=hash"});
  }
}

TEST(JobTest, PreloadEditing) {
  EXPECT_EQ(PrependPreload("", "/l.so"), "/l.so");
  EXPECT_EQ(PrependPreload("/a.so", "/l.so"), "/l.so:/a.so");
  EXPECT_EQ(PrependPreload("/a.so /l.so:/b.so", "/l.so"), "/l.so:/a.so:/b.so");
  EXPECT_EQ(PrependPreload("/l.so", "/l.so"), "/l.so");
  EXPECT_EQ(RemovePreload("/l.so", "/l.so"), "");
  EXPECT_EQ(RemovePreload("/a.so::/l.so /b.so", "/l.so"), "/a.so:/b.so");
}

}  // namespace
}  // namespace fanstore::spank
