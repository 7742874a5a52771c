// The node agent: bootstrap, placement, stage-in, metadata exchange, the metadata table, and
// the local service. One per node per job, running as the job user.
#pragma once

#include <atomic>
#include <condition_variable>
#include <thread>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/bootstrap.h"
#include "agent/cache.h"
#include "agent/peer.h"
#include "agent/server.h"
#include "common/run_dir.h"
#include "common/status.h"
#include "common/table.h"
#include "common/unique_fd.h"
#include "format/manifest.h"
#include "format/shard.h"
#include "common/thread_pool.h"

namespace fanstore::agent {

struct Config {
  std::string dataset;      // DS.fs directory
  std::string local_dir;    // node-local directory for the staged copy (created, private)
  std::string run_dir;      // private directory for agent.sock, table, status.json
  std::string mount;        // virtual path clients use
  std::string bootstrap = "auto";
  uint32_t replicas = 0;    // 0: every node holds every shard
  std::string node_name;    // for messages; default: SLURMD_NODENAME or the hostname
  size_t threads = 0;
  uint64_t cache_size = 0;  // bytes for files fetched from peers; 0: half the free space left
  bool peers = true;        // fetch from other agents (else straight from the dataset)
  bool prefetch = true;     // on first use of a remote shard, stream all of it into the cache
  std::string unpack = "auto";  // auto|eager|lazy, see --unpack
  std::string job_id;       // the Slurm job id, with the PMIx namespace the job's identity
  std::string peer_addr;    // address or interface for the peer service; "" picks one
};

using run_dir::kSocketName;
using run_dir::kStatusName;
using run_dir::kTableName;

class Agent {
 public:
  explicit Agent(Config cfg);
  ~Agent();

  // Stages in and publishes the table; returns once the agent is ready to serve (or failed).
  // On failure status.json says why and everything else the agent created is removed.
  Status Start();
  // Asks a Start in progress to stop soon (the staging stops at its next read); any thread.
  void Cancel();
  // Removes everything the agent created: socket, table, local data and the run directory.
  void Shutdown();
  // The agent's own files, and the directories when the agent created them (status.json is
  // kept for the launcher with keep_status). From any thread, even while others are stuck.
  void RemoveOwnFiles(bool keep_status);
  // A JSON summary of the counters (also served as kStats).
  std::string StatsJson() const;

 private:
  struct FileRef {
    uint32_t shard;
    uint32_t entry;
    bool local;
  };

  using Shards = std::vector<std::unique_ptr<format::ShardFile>>;

  Status Prepare();
  // Opens this node's shards, stages them in the background while the indexes are exchanged
  // and the table built, then agrees with every agent that all staged before publishing the
  // table. `st` is Prepare's outcome: a failed agent still takes part in the exchange.
  Status StageAndPublish(Status st);
  // The free space, and the unpack mode from the manifest (lazy: makes the directory for the
  // shard copies).
  Status ChooseUnpack();
  // The exact space check, with the indexes: how much the share and the cache may take, and
  // whether the lazy copies and files fit side by side after all.
  Status PlanStage(const Shards& shards, bool* lazy_fits);
  // Copies this node's shards (lazy) or unpacks `shards` (eager); stops on stage_abort_.
  Status Stage(const Shards* shards);
  // This agent's exchange record: the indexes and symlink targets of the shards it is primary for.
  Result<std::string> EncodeRecords(const Shards& shards);
  Status DecodeRecords(const std::vector<std::string>& all, const Shards& shards);
  Status BuildTable();
  Status PublishTable();
  void WriteStatus(const std::string& state, const std::string& error);
  Reply Handle(proto::Op op, const std::string& payload);
  Reply Open(const std::string& path);
  // A file held elsewhere: from the cache, else from a holder (one fetch for concurrent
  // opens), else straight from the shard in the dataset directory. Returns a descriptor.
  Result<int> RemoteOpen(const FileRef& ref);
  Status FetchInto(const FileRef& ref, int out, bool* local_error);
  void TestPause(const std::string& phase);
  Status ReadFromDataset(const FileRef& ref, const std::function<Status(std::string_view)>& sink);
  int ServeLocal(uint32_t shard, uint32_t entry, int* fd, uint64_t* size);
  std::vector<uint32_t> ShardFiles(uint32_t shard);
  // Lazy unpack: makes <data_root>/<path> of a file of a local shard exist, unpacking it from
  // the local shard copy now unless it is already (another thread unpacking it is waited for).
  Status EnsureUnpacked(uint32_t shard, uint32_t entry);
  // The state machine behind it. Claim returns true when the caller must unpack the file (it
  // is then marked busy); with `wait` it waits for a busy file, else it leaves it.
  bool ClaimUnpack(uint32_t shard, uint32_t entry, bool wait);
  void FinishUnpack(uint32_t shard, uint32_t entry, bool ok);
  void UnpackLoop();
  // Queues `shard` for a background bulk transfer into the cache, once, when it fits.
  void MaybePrefetch(uint32_t shard);
  void PrefetchLoop();
  std::string StatusJson() const;

  Config cfg_;
  std::unique_ptr<Bootstrap> boot_;
  format::Manifest manifest_;
  format::Dictionary dict_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<uint32_t> mine_;                           // shards staged here
  uint32_t replicas_ = 1;                                // copies of each shard among the agents
  uint64_t free_bytes_ = 0;                              // in the local directory, before stage-in
  uint64_t free_inodes_ = UINT64_MAX;
  UniqueFD alive_lock_;                                  // the run directory's lock (run_dir::HoldAlive)
  uint64_t cache_capacity_ = 0;
  std::atomic<bool> stage_abort_{false}, stop_requested_{false};
  std::vector<std::vector<format::IndexEntry>> index_;   // every shard's entries, from the exchange
  std::vector<bool> local_shard_;
  // Lazy unpack (lazy_): the local shard copies by shard id, each file's state (kPacked,
  // kBusy, kDone) and table entry, and the background unpacker.
  bool lazy_ = false;
  std::string copy_dir_;                                  // <local_dir>/shards
  std::vector<std::unique_ptr<format::ShardFile>> copies_;
  std::mutex unpack_mu_;
  std::condition_variable unpack_cv_;
  std::vector<std::vector<uint8_t>> unpack_state_;
  std::vector<std::vector<uint32_t>> table_index_;
  std::atomic<bool> unpacked_{false}, unpack_stop_{false};
  std::atomic<bool> serving_{false};  // peers are served once the share is staged (and copies_ set)
  std::atomic<uint64_t> unpacked_on_demand_{0};
  std::atomic<double> unpack_seconds_{0};
  std::thread unpacker_;
  UniqueFD data_root_fd_;
  std::string table_image_;                               // the published table, and the
  table::TableView view_;                                 // agent's own view of it
  std::vector<FileRef> file_refs_;                        // by table entry; shard UINT32_MAX: no file
  std::unordered_map<std::string, std::string> links_;   // symlink targets by path
  std::mutex shard_fd_mu_;
  // Reads from the dataset at once: when a peer stalls or dies, this node's opens of its files
  // fall back to the parallel file system, never more than this many at a time.
  static constexpr std::ptrdiff_t kMaxSourceReads = 4;
  std::counting_semaphore<kMaxSourceReads> source_slots_{kMaxSourceReads};
  std::atomic<int> source_in_flight_{0}, source_peak_{0};
  std::unordered_map<uint32_t, int> shard_fds_;          // shards opened for fallback reads
  LocalServer server_;
  std::string data_root_;                                 // <local_dir>/data: staged files
  std::unique_ptr<ThreadPool> peer_pool_;
  PeerServer peer_server_;
  PeerClient peers_;
  FileCache cache_;
  struct Inflight;
  std::mutex inflight_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Inflight>> inflight_;
  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;
  std::vector<uint32_t> prefetch_queue_;
  std::vector<bool> prefetch_seen_;
  std::vector<uint64_t> shard_raw_bytes_;
  bool prefetch_stop_ = false;
  std::thread prefetcher_;
  table::AgentLock alive_;
  table::ClientCounters* client_counters_ = nullptr;  // shared with clients, see table.h  // held while serving; clients see its release or our death
  bool created_local_ = false, created_run_ = false, server_started_ = false;
  bool have_local_ = false, have_run_ = false;  // ensured (created, or given and checked)
  std::string state_ = "starting", error_;
  mutable std::mutex state_mu_;

  // Counters.
  std::atomic<uint64_t> staged_bytes_{0}, staged_files_{0}, read_bytes_{0};
  std::atomic<double> stage_seconds_{0};  // written by the staging thread, read by stats
  double exchange_seconds_ = 0;
  uint64_t exchange_bytes_ = 0;
  std::atomic<uint64_t> opens_local_{0}, opens_remote_{0}, opens_cached_{0}, opens_fallback_{0}, open_errors_{0};
  std::atomic<uint64_t> bytes_remote_{0}, bytes_cached_{0}, bytes_fallback_{0}, peer_errors_{0};
  std::atomic<uint64_t> prefetched_files_{0}, prefetched_bytes_{0}, prefetched_shards_{0};
};

}  // namespace fanstore::agent
