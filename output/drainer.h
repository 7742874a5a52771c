// A job's output directory on one node, drained to a directory on the parallel file system in
// the background (issue 29: checkpoints).
//
// What is drained: a regular file once it is closed after writing (inotify IN_CLOSE_WRITE) or
// renamed into place (IN_MOVED_TO), and nobody has it open for writing any more (a read lease
// can be had). Events settle for `settle_ms` first, so that `torch.save(tmp); os.replace(tmp,
// final)` copies the final name only. Each file is committed by CommitFile (commit.h): its final
// name on the parallel file system never holds a partial or corrupt file, and a file rewritten
// while it drains is drained again (the last complete version wins).
//
// Two nodes writing the same relative path: the first to commit it keeps the name; the other's
// copy goes to NAME.node-NODE beside it, and both are in the manifest.
//
// Failures of the parallel file system (unreachable, full) are retried with a backoff doubling
// from `retry_ms` to `retry_max_ms`; the status shows the last error. Finish() drains what is
// left until a deadline, then writes the manifest and reports by name what did not drain.
//
// The copying thread runs at the lowest CPU priority and in the idle I/O class. What its copies
// set going elsewhere does not: a parallel file system's client daemon, its servers (the test
// stand-in's sshfs and ssh take a core). So while the job reads (`activity`, a counter of its
// reads, moved since the last piece) each piece of a copy is followed by a pause nine times as
// long (at most 100 ms): the drain then takes at most a tenth of the time it would, and so does
// what it sets going. Not once Finish has begun: then the job is over. Thread safety:
// Stats() may be called from any thread; Start, Finish and the destructor from one.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore::output {

struct DrainerOptions {
  std::string local;   // the node's output directory (exists; the user's)
  std::string target;  // the directory on the parallel file system (made if missing)
  std::string node;    // this node's name, for the manifest and for a name two nodes wrote
  mode_t umask = 022;
  int settle_ms = 300;
  int retry_ms = 500;
  int retry_max_ms = 30000;
  std::function<uint64_t()> activity;  // a counter of the job's reads; empty: never yield
  int yield_factor = 9;                // pause after a piece while the job reads, times the piece
};

struct DrainStats {
  uint64_t files_pending = 0, bytes_pending = 0;
  uint64_t files_drained = 0, bytes_drained = 0;
  uint64_t files_failed = 0;  // failed at least once and not drained since
  uint64_t retries = 0;
  double rate_bytes_per_s = 0;  // over the copies so far
  double yielded_seconds = 0;   // paused for the job's reads
  std::string last_error;
};

// What did not drain, by relative path, with why.
struct DrainReport {
  uint64_t files_drained = 0, bytes_drained = 0;
  std::map<std::string, std::string> not_drained;
  std::string manifest_error;  // the manifest could not be written: why
};

// What the agent's log lines about the output start with (the plugin passes them on).
inline constexpr char kReportTag[] = "output:";

// How long Finish may take beyond its deadline: the manifest's lock (another node's, waited for
// up to 10 s) and its write. Whoever waits for an agent's drain allows this much more.
inline constexpr int kFinishSlackMs = 15000;

// The manifest's name in the target directory.
inline constexpr char kManifestName[] = ".fanstore-output.json";

class Drainer {
 public:
  Drainer() = default;
  ~Drainer();
  Drainer(const Drainer&) = delete;
  Drainer& operator=(const Drainer&) = delete;

  [[nodiscard]] Status Start(const DrainerOptions& opts);
  // Stops watching, drains what is left (a last walk of the directory included) until
  // `deadline`, writes the manifest and says what did not drain.
  DrainReport Finish(std::chrono::steady_clock::time_point deadline);
  DrainStats Stats() const;

 private:
  struct Pending {
    std::chrono::steady_clock::time_point due;
    int backoff_ms = 0;
    std::string error;
  };
  struct Done {
    uint64_t size = 0, xxh3 = 0;
    int64_t mtime_ns = 0;
    std::string as;  // the name it went to, when not its own
    double at = 0;   // seconds since the epoch
  };
  void Watch();
  void Work();
  void AddWatch(const std::string& rel);
  void Scan(const std::string& rel);
  void Enqueue(const std::string& rel, int delay_ms);
  // One attempt; true when the file needs no further attempt (drained, gone or unchanged).
  bool Drain(const std::string& rel, std::string* error);
  // After a piece of a copy that took `piece`: the pause that yields to the job's reads.
  void Yield(std::chrono::steady_clock::duration piece);
  Status WriteManifest(const DrainReport& report);
  Status EnsureTarget();

  DrainerOptions opts_;
  UniqueFD local_fd_, target_fd_, inotify_fd_, wake_fd_;
  std::map<int, std::string> watches_;  // watch descriptor -> directory, relative
  std::thread watcher_, worker_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Pending> pending_;
  std::map<std::string, Done> done_;
  bool finishing_ = false;
  bool busy_ = false;  // the worker is draining in_flight_
  std::string in_flight_;
  DrainStats stats_;
  double copy_seconds_ = 0;
  uint64_t last_activity_ = 0;  // the worker's alone
};

}  // namespace fanstore::output
