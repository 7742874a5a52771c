// fanstore-agent: one per node per job. Started by the SPANK plugin as a PMIx job step, or by
// `fanstore run` on one machine. Runs as the job user.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "agent/read_entry.h"
#include "common/args.h"
#include "common/env.h"
#include "common/io.h"
#include "common/log.h"
#include "common/run_dir.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

constexpr int kExitUndrained = 3;

// The --read-entry mode (argv[0] is "--read-entry"): writes the file to stdout. Exit status 0, or
// with the cause on stderr: 3 the dataset cannot be read (gone, unreachable), 4 its bytes are
// damaged, 2 bad arguments.
int ReadEntryMain(int argc, char** argv) {
  CLI::App app("Writes one file of the dataset to standard output, checked against its hash.",
               "fanstore-agent --read-entry");
  args::Configure(app);
  app.footer(
      "Exit status: 0 written, 2 usage error, 3 the dataset cannot be read, 4 its bytes are\n"
      "damaged (what was written must then be discarded).");
  std::string dataset;
  uint32_t shard = 0, index = 0;
  app.add_option("DATASET", dataset, "the dataset directory")->required();
  app.add_option("SHARD", shard, "the shard's number in the manifest")
      ->required()
      ->check(args::IntRange(0, UINT32_MAX));
  app.add_option("INDEX", index, "the file's index in the shard")
      ->required()
      ->check(args::IntRange(0, UINT32_MAX));
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;
  Status st = ReadEntry(dataset, shard, index, [](std::string_view piece) {
    return WriteFull(STDOUT_FILENO, piece.data(), piece.size(), "stdout");
  });
  if (st.ok()) return 0;
  std::fprintf(stderr, "fanstore: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kCorruption ? 4 : 3;
}

// One write with O_APPEND: the lines of several nodes appending to one shared file do not mix.
// The name is predictable and the directory may be shared: the file is created private, and
// one that is not the job user's own plain file (planted by someone else, a symlink, a FIFO, a
// hard link) is refused.
Status AppendLine(const std::string& path, std::string line) {
  line += '\n';
  UniqueFD fd(::open(path.c_str(),
                     O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + path, errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::getuid() || st.st_nlink != 1)
    return Status::Permission(path + " is not a plain file of this user (owner uid " +
                              std::to_string(st.st_uid) + "); not written");
  ssize_t w = ::write(fd.get(), line.data(), line.size());
  if (w != static_cast<ssize_t>(line.size()))
    return Status::FromErrno("write " + path, w < 0 ? errno : ENOSPC);
  return Status::OK();
}

// Start-up allocates and frees a few hundred bytes per file (indexes, the table, the exchange)
// on every thread at once. Where each page fault is costly (virtual machines) that doubles
// the agent's CPU time before it is ready, taken from the copy it races. So the agent runs
// with one malloc arena on transparent huge pages (where the kernel offers them on request):
// glibc reads these settings only at start-up, hence one re-exec. (Fixed mmap and trim
// thresholds of 32 and 64 MiB, tried too, kept freed memory and added 70-140 bytes per file
// to the peak at 1.33M files, for no gain in time.) FANSTORE_AGENT_MALLOC=0 keeps glibc's
// defaults.
void TuneAllocator(char** argv) {
  if (std::getenv(env::kAgentMalloc)) return;  // tuned already, or opted out
  std::string tunables = "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1";
  if (const char* user = std::getenv(env::kGlibcTunables); user && *user)
    tunables += std::string(":") + user;  // the user's win
  // The marker first: without it the new image would re-execute itself again.
  if (::setenv(env::kAgentMalloc, "1", 1) != 0 ||
      ::setenv(env::kGlibcTunables, tunables.c_str(), 1) != 0)
    return;
  // By its own path, not /proc/self/exe, so that the process keeps its name (ps, pgrep).
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  ::execv(self, argv);  // on failure the agent runs with the defaults
}

// How this node stages in.
void AddStagingOptions(CLI::App& app, Config* cfg) {
  app.add_option("--bootstrap", cfg->bootstrap,
                 "auto (PMIx when started by srun --mpi=pmix), single or pmix")
      ->type_name("KIND")
      ->check(args::OneOf({"auto", "single", "pmix"}));
  app.add_option("--replicas", cfg->replicas,
                 "nodes holding each shard, 1 to 100000 or all (default all)")
      ->type_name("N|all")
      ->transform(CLI::Validator(
          [](std::string& s) {
            if (s != "all") return args::IntRange(1, 100000)(s);
            s = "0";  // Config's "every node"
            return std::string();
          },
          ""));
  app.add_option("--threads", cfg->threads, "stage-in threads (default: all cores)")
      ->type_name("N")
      ->check(args::IntRange(1, args::kMaxThreads));
  app.add_option("--image", cfg->image,
                 "auto (default), yes or no: write this node's share as one read-only\n"
                 "EROFS image (its metadata and one file of data, no file per dataset\n"
                 "file) and mount it on the local directory's data root, so that\n"
                 "staging, reading and teardown pay no per-file cost on the node's\n"
                 "disk. Needs root and a kernel that mounts EROFS from a file (6.12+);\n"
                 "auto uses it when the agent runs as root, the local directory is not\n"
                 "tmpfs and --unpack is auto, and falls back to files when the mount\n"
                 "fails")
      ->type_name("MODE")
      ->check(args::OneOf({"auto", "yes", "no"}));
  app.add_option("--unpack", cfg->unpack,
                 "eager: unpack every file before reporting ready; lazy: copy the\n"
                 "shards as they are, report ready, then unpack in the background\n"
                 "(a file not yet unpacked is unpacked when first opened); auto\n"
                 "(default): lazy when the dataset's files average under 64 KiB,\n"
                 "where creating files, not reading the source, bounds stage-in,\n"
                 "and there is room for this node's shard copies beside its\n"
                 "files")
      ->type_name("MODE")
      ->check(args::OneOf(kUnpackModes));
}

// What this agent does for, and asks of, the other nodes' agents.
void AddPeerOptions(CLI::App& app, Config* cfg) {
  app.add_option("--cache-size", cfg->cache_size,
                 "room for files fetched from other agents, e.g. 4G (default, and at\n"
                 "most: half the free space left after stage-in); least recently\n"
                 "used go first")
      ->type_name("SIZE")
      ->transform(args::Size());
  app.add_flag_callback(
      "--no-peers", [cfg] { cfg->peers = false; },
      "read files held elsewhere straight from the dataset directory");
  app.add_flag_callback(
      "--no-prefetch", [cfg] { cfg->prefetch = false; },
      "fetch remote files one by one only; by default the first use of a\n"
      "remote shard streams the whole shard into the cache when it fits");
  app.add_option("--prefetch-streams", cfg->prefetch_streams,
                 "remote shards streamed into the cache at once, one thread each,\n"
                 "1 to 4 (default: 2 with 16 CPUs or more to use, else 1)")
      ->type_name("N")
      ->check(args::IntRange(1, 4));
  app.add_option("--job-id", cfg->job_id,
                 "the Slurm job id; with the PMIx namespace it binds the peers'\n"
                 "credentials to this job (default: SLURM_JOB_ID)")
      ->type_name("ID")
      ->check(args::IntRange(1, UINT32_MAX));
  app.add_option("--peer-addr", cfg->peer_addr,
                 "the IPv4 address, or the interface, the peer service listens on\n"
                 "(default: the interface routing to the job's launch node)")
      ->type_name("ADDR|IFACE");
}

// The job's output, drained to the parallel file system.
void AddOutputOptions(CLI::App& app, Config* cfg) {
  app.add_option("--output", cfg->output,
                 "a directory on the parallel file system: every file written to\n"
                 "--output-dir is copied there in the background once it is closed\n"
                 "(or renamed into place), verified and renamed, never half-written")
      ->type_name("DIR");
  app.add_option("--output-dir", cfg->output_dir,
                 "this node's output directory, which the tasks write to (created,\n"
                 "mode 0700; removed at shutdown when everything in it drained)")
      ->type_name("DIR");
  app.add_option("--drain-timeout", cfg->drain_timeout_s,
                 "at shutdown, wait this long at most for the output to drain\n"
                 "(default 300); what did not is named and stays in --output-dir")
      ->type_name("SEC")
      ->check(CLI::Range(0.0, 7 * 24 * 3600.0));
}

// The options; returns -1 to go on, else the exit status.
int ParseOptions(int argc, char** argv, Config* cfg, std::string* stats_out) {
  CLI::App app(
      "The FanStore node agent. Stages this node's share of DS.fs into DIR, exchanges metadata\n"
      "with the other agents of the job (PMIx), publishes the metadata table and serves local\n"
      "clients until SIGTERM (or SIGINT, SIGHUP, SIGUSR2), then removes everything it created.\n"
      "With --output it also drains the job's output directory to the parallel file system,\n"
      "and at the end waits for that drain, up to --drain-timeout.\n"
      "Normally started by the SPANK plugin or by `fanstore run`, not by hand.\n"
      "\n"
      "Other modes: fanstore-agent --read-entry DS.fs SHARD INDEX writes one file of the\n"
      "dataset to standard output (clients' fallback when their agent is gone);\n"
      "fanstore-agent --read-state DIR prints the state in DIR/status.json.",
      "fanstore-agent");
  args::Configure(app);
  app.footer(
      "Environment: FANSTORE_AGENT_MALLOC=0 keeps glibc's malloc defaults (the agent otherwise\n"
      "re-executes itself once with GLIBC_TUNABLES for one arena on transparent huge pages).\n"
      "\n"
      "status.json in the run directory reads {\"state\": \"starting|staging|ready|failed\",\n"
      "\"error\": ..., \"unpacked\": true|false}.\n"
      "Exit status: 0 after a clean shutdown, 1 when the dataset could not be served, 2 usage,\n"
      "3 when some output did not drain (named on stderr; it stays in --output-dir).");
  app.add_option("--dataset", cfg->dataset, "the packed dataset (optional with --output)")
      ->type_name("DS.fs");
  app.add_option("--local-dir", cfg->local_dir,
                 "node-local directory for the staged files (created, mode 0700;\n"
                 "required with --dataset)")
      ->type_name("DIR");
  app.add_flag("--epilog-unmounts-local-dir", cfg->epilog_unmounts_local_dir,
               "when the local directory is a mount point (the SPANK plugin's per-job\n"
               "tmpfs), leave its files at shutdown: the job's epilog unmounts it whole");
  app.add_flag("--leave-local-dir", cfg->leave_local_dir,
               "leave the staged files at shutdown: the launcher removes the local\n"
               "directory (fanstore run does, on every core, whether the agent stopped or not)");
  app.add_option("--run-dir", cfg->run_dir,
                 "private directory for agent.sock, table and status.json (0700)\n"
                 "(in both directories, %r is replaced by the agent's rank)")
      ->type_name("DIR")
      ->required();
  app.add_option("--mount", cfg->mount, "the virtual path clients use (required with --dataset)")
      ->type_name("PATH");
  AddOutputOptions(app, cfg);
  AddStagingOptions(app, cfg);
  AddPeerOptions(app, cfg);
  app.add_option("--node-name", cfg->node_name,
                 "this node's name in messages (default: SLURMD_NODENAME, else the host name)")
      ->type_name("NAME");
  app.add_option("--stats-out", *stats_out,
                 "at shutdown, append this agent's final counters to FILE as one line\n"
                 "of JSON (`fanstore stats FILE` summarises the lines of all nodes)")
      ->type_name("FILE");
  app.add_flag_callback(
      "-v,--verbose", [] { log::SetLevel(log::kDebug); }, "log progress and statistics");
  app.add_flag_callback(
      "-q,--quiet", [] { log::SetLevel(log::kWarn); }, "log only warnings and errors");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;
  const char* missing = nullptr;
  if (cfg->dataset.empty() && cfg->output.empty())
    missing = "--dataset, --output, or both";
  else if (!cfg->dataset.empty() && (cfg->local_dir.empty() || cfg->mount.empty()))
    missing = "--local-dir and --mount with --dataset";
  else if (cfg->output.empty() != cfg->output_dir.empty())
    missing = "--output and --output-dir together";
  return missing == nullptr ? -1 : args::UsageError(app, std::string("give ") + missing);
}

// What the launcher left unsaid: the job id and the node's name from the environment.
void FillDefaults(Config* cfg) {
  // The plugin's mount service: a socket inherited at this number, kept from the job's programs.
  if (const char* fd = std::getenv(env::kMountService); fd && *fd) {
    char* end = nullptr;
    const long n = std::strtol(fd, &end, 10);
    struct stat st;
    if (*end == '\0' && n > 2 && n < 1024 && ::fstat(static_cast<int>(n), &st) == 0 &&
        S_ISSOCK(st.st_mode) && ::fcntl(static_cast<int>(n), F_SETFD, FD_CLOEXEC) == 0)
      cfg->mount_service = static_cast<int>(n);
    ::unsetenv(env::kMountService);
  }
  if (const char* job = std::getenv(env::kSlurmJobId); cfg->job_id.empty() && job)
    cfg->job_id = job;
  if (cfg->node_name.empty()) {
    const char* n = std::getenv(env::kSlurmdNodeName);
    char host[256] = "localhost";
    if (!n) ::gethostname(host, sizeof host - 1);
    cfg->node_name = n ? n : host;
  }
}

// Signals go to one thread, which stops the agent; everything else runs with them blocked.
// `starting` is true while Start runs.
void HandleSignals(Agent* a, std::atomic<bool>* stop, const std::atomic<bool>* starting) {
  static sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR2);  // from the plugin, through srun, at the end of the batch script
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::thread([a, stop, starting] {
    int sig = 0;
    sigwait(&set, &sig);
    LOG_INFO("%s: stopping", strsignal(sig));
    *stop = true;
    a->Cancel();
    // Start may sit in a collective that can no longer complete (a peer died during the
    // exchange), where no flag reaches it: then clean up from here, before the launcher's
    // SIGKILL would leave the staged files behind.
    for (int i = 0; i < 20 && *starting; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!*starting) return;
    LOG_WARN("stopped while waiting for the other agents; removing this agent's files");
    a->RemoveOwnFiles(/*keep_status=*/false);
    ::_exit(1);
  }).detach();
}

// Stages in, serves until a signal, saves the final counters, and shuts down.
int Serve(const Config& cfg, const std::string& stats_out) {
  Agent a(cfg);
  std::atomic<bool> stop{false}, starting{true};
  HandleSignals(&a, &stop, &starting);
  Status st = a.Start();
  starting = false;
  if (!st.ok()) {
    if (stop) {
      LOG_INFO("stopped during stage-in");
      a.Shutdown();
      return 0;
    }
    LOG_ERROR("%s", st.ToString().c_str());
    return 1;
  }
  while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool drained = a.FinishOutput();  // the clients are gone: what they wrote is complete
  const std::string stats = a.StatsJson();
  LOG_INFO("shutting down; stats: %s", stats.c_str());
  if (!stats_out.empty()) {
    Status ws = AppendLine(stats_out, stats);
    if (!ws.ok()) LOG_WARN("final counters not saved: %s", ws.ToString().c_str());
  }
  a.Shutdown();
  return drained ? 0 : kExitUndrained;
}

// --read-state DIR: the state status.json in DIR holds, as the agent wrote it, whether or not an
// agent still stands behind it; nothing and exit status 1 when there is none. The agent step's
// shell asks it after its agent ended, so that no shell code parses JSON.
int ReadStateMain(int argc, char** argv) {
  CLI::App app("Prints the state in DIR/status.json: starting, staging, ready or failed.",
               "fanstore-agent --read-state");
  args::Configure(app);
  app.footer("Exit status: 0 printed, 1 no status.json or not the agent's, 2 usage error.");
  std::string dir;
  app.add_option("DIR", dir, "the agent's run directory")->required();
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;
  auto st = run_dir::ReadStatus(dir);
  if (!st.ok()) {
    std::fprintf(stderr, "fanstore-agent: %s\n", st.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", run_dir::StateName(st->state));
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--read-entry")) return ReadEntryMain(argc - 1, argv + 1);
  if (argc > 1 && !std::strcmp(argv[1], "--read-state")) return ReadStateMain(argc - 1, argv + 1);
  TuneAllocator(argv);
  Config cfg;
  std::string stats_out;
  if (int rc = ParseOptions(argc, argv, &cfg, &stats_out); rc >= 0) return rc;
  FillDefaults(&cfg);
  // The agent never runs through its own interception library.
  ::setenv(env::kDisable, "1", 1);
  ::unsetenv(env::kLdPreload);
  // In a Slurm job the agent runs as the job user; root there means a broken launch.
  if (::geteuid() == 0 && std::getenv(env::kSlurmJobId) && !std::getenv(env::kAllowRoot)) {
    std::fprintf(
        stderr,
        "fanstore-agent: refusing to run as root in a Slurm job; agents run as the job user\n");
    return 1;
  }
  const std::string tag = "fanstore-agent[" + cfg.node_name + "]";
  log::SetTag(tag.c_str());
  return Serve(cfg, stats_out);
}

}  // namespace fanstore::agent

int main(int argc, char** argv) { return fanstore::agent::Main(argc, argv); }
