// fanstore-agent: one per node per job. Started by the SPANK plugin as a PMIx job step, or by
// `fanstore run` on one machine. Runs as the job user.
#include <fcntl.h>
#include <getopt.h>
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
#include "common/text.h"
#include "common/env.h"
#include "common/log.h"
#include "common/unique_fd.h"
#include "pack/pack.h"

namespace {

const char kHelp[] =
    "Usage: fanstore-agent --dataset DS.fs --local-dir DIR --run-dir DIR --mount PATH\n"
    "                      [--bootstrap auto|single|pmix] [--replicas N|all] [--threads N]\n"
    "                      [--cache-size SIZE] [--no-peers] [--no-prefetch] [--node-name NAME]\n"
    "                      [--job-id ID] [--stats-out FILE] [--unpack auto|eager|lazy]\n"
    "                      [--peer-addr ADDR|IFACE] [--verbose|--quiet]\n"
    "\n"
    "The FanStore node agent. Stages this node's share of DS.fs into DIR, exchanges metadata\n"
    "with the other agents of the job (PMIx), publishes the metadata table and serves local\n"
    "clients until SIGTERM, then removes everything it created. Normally started by the SPANK\n"
    "plugin or by `fanstore run`, not by hand.\n"
    "\n"
    "  --dataset DS.fs    the packed dataset\n"
    "  --local-dir DIR    node-local directory for the staged files (created, mode 0700)\n"
    "  --run-dir DIR      private directory for agent.sock, table and status.json (0700)\n"
    "                     (in both directories, %r is replaced by the agent's rank)\n"
    "  --mount PATH       the virtual path clients use\n"
    "  --bootstrap KIND   auto (PMIx when started by srun --mpi=pmix), single or pmix\n"
    "  --replicas N|all   nodes holding each shard (default all)\n"
    "  --threads N        stage-in threads (default: all cores)\n"
    "  --cache-size SIZE  room for files fetched from other agents, e.g. 4G (default, and at\n"
    "                     most: half the free space left after stage-in); least recently\n"
    "                     used go first\n"
    "  --no-peers         read files held elsewhere straight from the dataset directory\n"
    "  --no-prefetch      fetch remote files one by one only; by default the first use of a\n"
    "                     remote shard streams the whole shard into the cache when it fits\n"
    "  --unpack MODE      eager: unpack every file before reporting ready; lazy: copy the\n"
    "                     shards as they are, report ready, then unpack in the background\n"
    "                     (a file not yet unpacked is unpacked when first opened); auto\n"
    "                     (default): lazy when the dataset's files average under 64 KiB,\n"
    "                     where creating files, not reading the source, bounds stage-in,\n"
    "                     and there is room for this node's shard copies beside its\n"
    "                     files\n"
    "  --job-id ID        the Slurm job id; with the PMIx namespace it binds the peers'\n"
    "                     credentials to this job (default: SLURM_JOB_ID)\n"
    "  --peer-addr A      the IPv4 address, or the interface, the peer service listens on\n"
    "                     (default: the interface routing to the job's launch node)\n"
    "  --stats-out FILE   at shutdown, append this agent's final counters to FILE as one line\n"
    "                     of JSON (`fanstore stats FILE` summarises the lines of all nodes)\n"
    "\n"
    "Environment: FANSTORE_AGENT_MALLOC=0 keeps glibc's malloc defaults (the agent otherwise\n"
    "re-executes itself once with GLIBC_TUNABLES for one arena on transparent huge pages).\n"
    "\n"
    "status.json in the run directory reads {\"state\": \"staging|ready|failed\", \"error\": ...,\n"
    "\"unpacked\": true|false}.\n"
    "Exit status: 0 after a clean shutdown, 1 when the dataset could not be served, 2 usage.\n";

// One write with O_APPEND: the lines of several nodes appending to one shared file do not mix.
// The name is predictable and the directory may be shared: the file is created private, and
// one that is not the job user's own plain file (planted by someone else, a symlink, a FIFO, a
// hard link) is refused.
fanstore::Status AppendLine(const std::string& path, std::string line) {
  line += '\n';
  fanstore::UniqueFD fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) return fanstore::Status::FromErrno("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fanstore::Status::FromErrno("stat " + path, errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::getuid() || st.st_nlink != 1)
    return fanstore::Status::Permission(path + " is not a plain file of this user (owner uid " + std::to_string(st.st_uid) +
                                        "); not written");
  ssize_t w = ::write(fd.get(), line.data(), line.size());
  if (w != static_cast<ssize_t>(line.size()))
    return fanstore::Status::FromErrno("write " + path, w < 0 ? errno : ENOSPC);
  return fanstore::Status::OK();
}

int Usage(const std::string& err) {
  std::fprintf(stderr, "fanstore-agent: %s\n\n%s", err.c_str(), kHelp);
  return 2;
}

}  // namespace

// Start-up allocates and frees a few hundred bytes per file (indexes, the table, the exchange)
// on every thread at once. Where each page fault is costly (virtual machines) that doubles
// the agent's CPU time before it is ready, taken from the copy it races. So the agent runs
// with one malloc arena on transparent huge pages (where the kernel offers them on request),
// with large buffers kept in the heap for reuse: glibc reads these settings only at start-up,
// hence one re-exec. FANSTORE_AGENT_MALLOC=0 keeps glibc's defaults.
void TuneAllocator(char** argv) {
  if (std::getenv("FANSTORE_AGENT_MALLOC")) return;  // tuned already, or opted out
  std::string tunables =
      "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=33554432:"
      "glibc.malloc.trim_threshold=67108864";
  if (const char* user = std::getenv("GLIBC_TUNABLES"); user && *user) tunables += std::string(":") + user;  // the user's win
  // The marker first: without it the new image would re-execute itself again.
  if (::setenv("FANSTORE_AGENT_MALLOC", "1", 1) != 0 || ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  // By its own path, not /proc/self/exe, so that the process keeps its name (ps, pgrep).
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  ::execv(self, argv);  // on failure the agent runs with the defaults
}

int main(int argc, char** argv) {
  using namespace fanstore;
  if (argc > 1 && !std::strcmp(argv[1], "--read-entry")) return agent::ReadEntryMain(argc, argv);
  TuneAllocator(argv);
  agent::Config cfg;
  std::string stats_out;
  static const option kOpts[] = {{"dataset", required_argument, nullptr, 'd'},
                                 {"local-dir", required_argument, nullptr, 'l'},
                                 {"run-dir", required_argument, nullptr, 'r'},
                                 {"mount", required_argument, nullptr, 'm'},
                                 {"bootstrap", required_argument, nullptr, 'b'},
                                 {"replicas", required_argument, nullptr, 'R'},
                                 {"threads", required_argument, nullptr, 't'},
                                 {"node-name", required_argument, nullptr, 'n'},
                                 {"job-id", required_argument, nullptr, 'j'},
                                 {"verbose", no_argument, nullptr, 'v'},
                                 {"quiet", no_argument, nullptr, 'q'},
                                 {"cache-size", required_argument, nullptr, 'c'},
                                 {"no-peers", no_argument, nullptr, 'P'},
                                 {"no-prefetch", no_argument, nullptr, 'N'},
                                 {"stats-out", required_argument, nullptr, 'S'},
                                 {"unpack", required_argument, nullptr, 'U'},
                                 {"peer-addr", required_argument, nullptr, 'A'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "vqh", kOpts, nullptr)) != -1) {
    switch (c) {
      case 'd': cfg.dataset = optarg; break;
      case 'l': cfg.local_dir = optarg; break;
      case 'r': cfg.run_dir = optarg; break;
      case 'm': cfg.mount = optarg; break;
      case 'b': cfg.bootstrap = optarg; break;
      case 'R':
        if (!std::strcmp(optarg, "all")) {
          cfg.replicas = 0;
        } else {
          char* end;
          long v = std::strtol(optarg, &end, 10);
          if (*end || v < 1 || v > 100000) return Usage(std::string("bad --replicas '") + optarg + "'");
          cfg.replicas = static_cast<uint32_t>(v);
        }
        break;
      case 't': {
        char* end;
        errno = 0;
        const long v = std::strtol(optarg, &end, 10);
        if (errno || end == optarg || *end || v < 1 || v > 1024) return Usage(std::string("bad --threads '") + optarg + "' (1 to 1024)");
        cfg.threads = static_cast<size_t>(v);
        break;
      }
      case 'n': cfg.node_name = optarg; break;
      case 'j': cfg.job_id = optarg; break;
      case 'A': cfg.peer_addr = optarg; break;
      case 'v': log::SetLevel(log::kDebug); break;
      case 'q': log::SetLevel(log::kWarn); break;
      case 'c':
        if (!(cfg.cache_size = ParseSize(optarg).value_or(0))) return Usage(std::string("bad --cache-size '") + optarg + "'");
        break;
      case 'P': cfg.peers = false; break;
      case 'N': cfg.prefetch = false; break;
      case 'S': stats_out = optarg; break;
      case 'U':
        if (std::strcmp(optarg, "auto") && std::strcmp(optarg, "eager") && std::strcmp(optarg, "lazy"))
          return Usage(std::string("bad --unpack '") + optarg + "' (auto, eager or lazy)");
        cfg.unpack = optarg;
        break;
      case 'h': std::fputs(kHelp, stdout); return 0;
      default: return Usage("bad option");
    }
  }
  if (optind != argc) return Usage(std::string("unexpected argument '") + argv[optind] + "'");
  if (cfg.dataset.empty() || cfg.local_dir.empty() || cfg.run_dir.empty() || cfg.mount.empty())
    return Usage("--dataset, --local-dir, --run-dir and --mount are required");
  if (cfg.job_id.empty() && std::getenv("SLURM_JOB_ID")) cfg.job_id = std::getenv("SLURM_JOB_ID");
  if (cfg.node_name.empty()) {
    const char* n = std::getenv("SLURMD_NODENAME");
    char host[256] = "localhost";
    if (!n) ::gethostname(host, sizeof host - 1);
    cfg.node_name = n ? n : host;
  }
  // The agent never runs through its own interception library.
  ::setenv(env::kDisable, "1", 1);
  ::unsetenv("LD_PRELOAD");
  // In a Slurm job the agent runs as the job user; root there means a broken launch.
  if (::geteuid() == 0 && std::getenv("SLURM_JOB_ID") && !std::getenv("FANSTORE_ALLOW_ROOT")) {
    std::fprintf(stderr, "fanstore-agent: refusing to run as root in a Slurm job; agents run as the job user\n");
    return 1;
  }
  std::string tag = "fanstore-agent[" + cfg.node_name + "]";
  log::SetTag(tag.c_str());

  // Signals go to one thread; everything else runs with them blocked.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  agent::Agent a(cfg);
  std::atomic<bool> stop{false}, starting{true};
  std::thread([&set, &stop, &starting, &a] {
    int sig = 0;
    sigwait(&set, &sig);
    LOG_INFO("%s: stopping", strsignal(sig));
    stop = true;
    a.Cancel();
    // Start may sit in a collective that can no longer complete (a peer died during the
    // exchange), where no flag reaches it: then clean up from here, before the launcher's
    // SIGKILL would leave the staged files behind.
    for (int i = 0; i < 20 && starting; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!starting) return;
    LOG_WARN("stopped while waiting for the other agents; removing this agent's files");
    a.RemoveOwnFiles(/*keep_status=*/false);
    ::_exit(1);
  }).detach();

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
  const std::string stats = a.StatsJson();
  LOG_INFO("shutting down; stats: %s", stats.c_str());
  if (!stats_out.empty()) {
    Status ws = AppendLine(stats_out, stats);
    if (!ws.ok()) LOG_WARN("final counters not saved: %s", ws.ToString().c_str());
  }
  a.Shutdown();
  return 0;
}
