// The node agent: one per node per job, running as the job user. Its roles, one file each:
//   agent.cc        lifecycle: prepare, stage and publish, ready, shut down
//   stage_plan.cc   the space check and the unpack mode; staging on a background thread
//   exchange.*      the metadata exchange's message (the indexes every agent publishes)
//   table_build.cc  the metadata table from every shard's index
//   serve.cc        opens from local clients, and local files for peers
//   remote.*        files held on other nodes: cache, peers, the dataset, prefetch
//   unpack.*        lazy unpack of the shard copies in the background
//   stats.cc        status.json and the counters
//   output.cc       the job's output on this node, drained to the parallel file system
#pragma once

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/bootstrap.h"
#include "agent/exchange.h"
#include "agent/gather.h"
#include "agent/index.h"
#include "agent/kernel_view.h"
#include "agent/peer.h"
#include "agent/remote.h"
#include "agent/server.h"
#include "agent/unpack.h"
#include "common/run_dir.h"
#include "common/status.h"
#include "common/table_builder.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"
#include "format/manifest.h"
#include "format/shard.h"
#include "image/erofs.h"
#include "output/drainer.h"

namespace fanstore::agent {

struct Config {
  std::string dataset;    // DS.fs directory; empty: output only (nothing to stage or serve)
  std::string local_dir;  // node-local directory for the staged copy (created, private)
  // When local_dir is a mount point, its files are left at shutdown for the epilog's unmount.
  bool epilog_unmounts_local_dir = false;
  // The staged files are left at shutdown: the launcher removes local_dir (fanstore run).
  bool leave_local_dir = false;
  std::string run_dir;  // private directory for agent.sock, table, status.json
  std::string mount;    // virtual path clients use
  std::string bootstrap = "auto";
  uint32_t replicas = 0;  // 0: every node holds every shard
  std::string node_name;  // for messages; default: SLURMD_NODENAME or the hostname
  size_t threads = 0;
  uint64_t cache_size = 0;        // bytes for files fetched from peers; 0: half the free space left
  bool peers = true;              // fetch from other agents (else straight from the dataset)
  bool prefetch = true;           // on first use of a remote shard, stream all of it into the cache
  uint32_t prefetch_streams = 0;  // shards streamed at once; 0: one per 8 usable CPUs, 1-2
  std::string unpack = "auto";    // auto|eager|lazy, see --unpack
  std::string image = "auto";     // auto|yes|no: the share as a mounted EROFS image, see --image
  int mount_service = -1;  // not root: the plugin's mount service (image/mount_service.h), if any
  std::string job_id;      // the Slurm job id, with the PMIx namespace the job's identity
  std::string peer_addr;   // address or interface for the peer service; "" picks one
  // The job's output (issue 29): output_dir, node-local, drained to `output`; empty: none.
  std::string output;
  std::string output_dir;        // created, private; removed once everything in it drained
  double drain_timeout_s = 300;  // at shutdown, how long the drain may still take
};

using run_dir::AgentState;
using run_dir::kSocketName;
using run_dir::kStatusName;
using run_dir::kTableName;
inline constexpr char kTableTmpName[] = "table.tmp";  // the table while it is built

// CPU seconds (user + system) of every thread of this process so far (the benchmarks' cost model).
double CpuSeconds();

class Agent {
 public:
  explicit Agent(Config cfg);
  ~Agent() { StopTicker(); }

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
  // A JSON summary of the counters (also served as kStats); with `series`, also the samples of
  // the last hour (kStats with the payload kStatsSeries).
  std::string StatsJson(bool series = false) const;
  // Waits for the output to drain, up to drain_timeout_s; logs what drained and, by name, what
  // did not (lines that start with kOutputReport), which stays in output_dir. Once, after the
  // clients are gone; nothing without --output. False when something did not drain.
  bool FinishOutput();

 private:
  using Shards = std::vector<std::unique_ptr<format::ShardFile>>;

  // Lifecycle (agent.cc).
  Status Prepare();
  // The local directory, the dataset's manifest and dictionary (not in an output-only agent).
  Status PrepareStaging();
  // Fails a Start: nothing half-made stays behind, status.json says why.
  Status Fail(const Status& st);
  // Opens this node's shards, stages them in the background while the indexes are exchanged
  // and the table built, then agrees with every agent that all staged before publishing the
  // table. `st` is Prepare's outcome: a failed agent still takes part in the exchange.
  Status StageAndPublish(Status st);
  // Starts the peer service (several agents, peers on).
  Status StartPeerService();
  // The first holder of a shard publishes its index.
  bool IsPrimary(uint32_t shard) const;
  // This agent's exchange message: the indexes and symlink targets of the shards it is primary
  // for, and its peer endpoint.
  std::string ExchangeMessage(const Shards& shards);
  // Whether an agent publishes the indexes of more than kFenceMaxFiles files in the exchange:
  // the same answer on every agent (the manifest and the placement), none without a manifest.
  bool LargeExchange() const;
  // About 90 KB of compressed index at ImageNet's 22 bytes per entry: small enough for Slurm's
  // ring fence to carry (it deadlocked on 14 MB contributions), where fetching each blob from
  // its node costs N-1 messages through slurmd per node (docs/design.md, "PMIx fence").
  static constexpr uint64_t kFenceMaxFiles = 4096;
  // With the peer service on, the fence carries pointers and the messages travel over it
  // (agent/gather.h) when the exchange is large, or when the whole dataset has more than
  // kGatherMinFiles files: every node would otherwise take the whole blob from its PMIx server
  // at about 40 MB/s (docs/design.md, "What a Get costs"), where the gather moves it over TCP
  // in log2 N steps. Without the peer service, a large exchange goes by PMIx's direct modex.
  // `large`: LargeExchange().
  bool GatherOverPeers(bool large) const;
  static constexpr uint64_t kGatherMinFiles = 256 << 10;  // about 6 MB of indexes
  // The most each rank's message can hold: the bytes of the shards it is primary for.
  std::vector<uint64_t> MessageBounds() const;
  // Sends `message` (or the failure `st`; freed once sent) and reads every agent's.
  Status ExchangeIndexes(Status st, std::string message, const Result<Shards>& shards,
                         bool* fenced);
  // The second round: did every agent stage its share?
  Status AgreeAllStaged(const Status& st);
  // Runs one round of the exchange, marked as such in status.json while it lasts.
  template <typename Round>
  auto InExchange(Round round);
  // The remote files and, in lazy mode, the unpacker, once the indexes are known.
  void InitRoles();
  Status PublishTable();
  void WriteStatus(AgentState state, const std::string& error);
  void TestPause(const std::string& phase);

  // Staging (stage_plan.cc).
  // The free space, and the unpack mode from the manifest (lazy: makes the directory for the
  // shard copies).
  Status ChooseUnpack();
  // Opens this node's shards and checks the share against the free space; the lazy copy is
  // started first, and dropped for eager unpack when the exact share does not fit beside it.
  Status OpenAndPlan(Result<Shards>* shards);
  // What this node's share holds, from one pass over each index as read at open (not kept as
  // entries); the targets of its links go to own_links_ for the exchange.
  struct Share {
    uint64_t entries = 0, files = 0, bytes = 0;
  };
  Status DigestShards(const Shards& shards, Share* share);
  // The exact space check: how much the share and the cache may take, and whether the lazy
  // copies and files fit side by side after all.
  Status PlanStage(const Shards& shards, const Share& totals, bool* lazy_fits);
  // NoSpace, naming the local directory and the share, when fewer than `inodes` are free.
  Status CheckInodes(uint64_t inodes) const;
  Status MakeRoomForShards() const;  // the open-file limit, for every shard of the share
  std::string ShareWords() const;    // "this node's share of the dataset (S of T shards) needs "
  // Copies this node's shards (lazy), unpacks `shards` (eager) or writes their image's blob
  // (image_) in the background; StageWait returns its outcome. The staging stops on
  // stage_abort_.
  Status StageAsync(const Shards* shards);
  Status StageWait();
  Status Stage(const Shards* shards);
  // The kernel-native path (image_stage.cc): whether this agent may write its share as an EROFS
  // image and mount it (root only); then the blob written from the local shards while the
  // table is built, and once it is, the image's tree written from the table, and the image
  // planned from it and mounted read-only on the data root by root's side (image/mount.h). When the
  // mount fails in auto mode, the share is unpacked as files instead (eager), with a warning.
  void ChooseImage();
  Status MakeDataDirs();  // every directory of the table under the data root
  Status StageImage(Shards* shards);
  // The blob, started with the staging (StageAsync) while the table is built: each file's
  // extent follows from the shards' indexes alone (the blob's order is theirs, every file at a
  // block boundary, as ErofsImage::Plan lays it out), so it needs no table.
  Status WriteBlob(const Shards& shards);
  Status WriteTreeAndMount();
  // fn(shard, entry) for every regular file of the shards this node does not hold, shard by
  // shard in index order (the order in which a holder streams a shard).
  void ForEachRemoteFile(const std::function<void(uint32_t, uint32_t)>& fn) const;
  // Whether the image also holds the files of other nodes' shards, fetched into it as they
  // arrive: when they fit where the cache would have had room (CacheCapacity).
  bool ImageTakesRemoteFiles() const;
  // Whether a regular file's entry (not a hard link's) is in one of this node's shards.
  bool InLocalShard(const table::Entry& file) const {
    return file.aux < local_shard_.size() && local_shard_[file.aux];
  }
  // The image's tree from the table, into fd (image::WriteTree), once the blob is written;
  // with_remote, each table entry's extent in the blob for the files of other nodes' shards
  // (RemoteFiles::kNoExtent for the rest). blob_size: what the image's files take of it.
  // This node's files in the blob's order (WriteBlob's), from the table: fn(table entry, size)
  // for each. Each shard's files must give the digest WriteBlob took of them.
  Status ForEachBlobFile(const std::function<void(uint32_t, uint64_t)>& fn) const;
  Status WriteImageTree(int fd, bool with_remote, std::vector<uint64_t>* remote_extent,
                        uint64_t* blob_size);
  // Hands the remote files' extents of the mounted image, and its blob, to remote_.
  void KeepRemoteFilesInImage(std::vector<uint64_t> extent);
  Status MountImage(int tree, int blob);  // on the data root, read-only
  void UnmountImage();
  // The warm walk, in the background on a low-priority thread, once the image is mounted:
  // reads this node's files whole in the blob's order, dropping the blob's pages behind it, then
  // looks up every other name, so that the kernel has each inode, dentry and page before the
  // job's first open (a first lookup on EROFS costs about 8 us of CPU; docs/design.md). Stopped
  // by UnmountImage.
  void StartImageWarmer();

  // The metadata table (table_build.cc), from the exchange's stored indexes, which it frees.
  Status BuildTable();
  table::BuildOptions TableOptions() const;
  // Bytes for files fetched from peers: none when every shard is held here.
  uint64_t CacheCapacity() const { return HoldsEveryShard() ? 0 : cache_capacity_; }

  // Serving (serve.cc): the local service's requests, and peers' requests for local files.
  Reply Handle(proto::Op op, const std::string& payload, UniqueFD passed);
  Reply ServeView(UniqueFD dev);
  Reply Open(const std::string& path);
  int ServeLocal(uint32_t shard, uint32_t entry, int* fd, uint64_t* size);
  std::vector<uint32_t> ShardFiles(uint32_t shard);

  // Output (output.cc): makes the output directory and starts draining it (with --output).
  Status StartOutput();
  nlohmann::json OutputJson() const;
  // A counter that moves while the job reads the dataset: the drain yields to it.
  uint64_t ReadActivity() const;

  // Statistics (stats.cc).
  std::string StatusJson() const;
  // Bytes served by source: local, remote, cached, fallback.
  std::array<uint64_t, 4> ServedBytes() const;
  // {"bytes_done", "bytes_total", "files_done", "files_total"}: the stage-in's progress.
  nlohmann::json StagingJson() const;
  // The samples, column by column: "t" (seconds), "local", "remote", "cached", "fallback",
  // "staged", "read" (bytes so far).
  nlohmann::json SeriesJson() const;
  // Once a second: a sample of the counters, and status.json rewritten while staging so that
  // its progress shows. Started by Prepare, stopped by Shutdown and the destructor.
  void StartTicker();
  void StopTicker();
  void Tick();

  Config cfg_;
  std::unique_ptr<Bootstrap> boot_;
  format::Manifest manifest_;
  format::Dictionary dict_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<uint32_t> mine_;  // shards staged here
  bool HoldsEveryShard() const { return mine_.size() == manifest_.shards.size(); }
  std::vector<bool> local_shard_;  // by shard
  uint32_t replicas_ = 1;          // copies of each shard among the agents
  uint64_t free_bytes_ = 0;        // in the local directory, before stage-in
  uint64_t free_inodes_ = UINT64_MAX;
  uint64_t share_inodes_ = 0;  // what the share's files take (PlanStage)
  uint64_t cache_capacity_ = 0;
  bool lazy_ = false;   // unpack the shard copies in the background once ready
  bool image_ = false;  // write the share as an EROFS image, mounted on the data root
  std::atomic<bool> image_mounted_{false};
  // The mounted image's blob (the warm walk drops its pages; the other nodes' files, when the
  // image takes them, are written into it), and each table entry's extent in it
  // (RemoteFiles::kNoExtent: none).
  UniqueFD image_blob_;
  // WriteBlob's: the blob (touched by nothing else until StageWait has returned, so that a stop
  // while it writes closes nothing under it), and its block size.
  UniqueFD blob_fd_;
  unsigned blob_block_bits_ = 9;
  // Per shard of this node's, in the staging's order: where its files begin in the blob and
  // what they take (DigestShards), and a digest of their sizes and paths' XXH3s in order
  // (WriteBlob), which the tree's check (WriteImageTree) computes again from the table: the
  // blob is written from each shard's index decoded once more, one shard a thread at a time.
  struct BlobShard {
    uint32_t shard = 0;
    uint64_t start = 0, bytes = 0, files = 0, digest = 0;
  };
  std::vector<BlobShard> blob_shards_;
  std::vector<uint64_t> image_extent_;
  std::string data_root_;  // <local_dir>/data: staged files
  UniqueFD data_root_fd_;
  std::string copy_dir_;  // <local_dir>/shards: lazy mode's shard copies
  UniqueFD alive_lock_;   // the run directory's lock (run_dir::HoldAlive)
  std::atomic<bool> stage_abort_{false}, stop_requested_{false};
  std::future<Status> staging_;

  // What the exchange said, and the table built from it.
  std::vector<exchange::Links> own_links_;  // by shard: the targets of our shards' links
  std::vector<std::string> exchanged_;      // every agent's message, until the table is built
  Gather gather_;  // a large exchange's messages, served to peers until the second round ends
  exchange::Decoded decoded_;  // views into exchanged_ or gather_, until the table is built
  std::unordered_map<std::string, std::string> links_;  // symlink targets by path
  table::FileImage table_image_;                        // the published table, and the
  table::TableView view_;                               // agent's own view of it
  Index index_;             // every shard's frames, by the table's entries
  table::AgentLock alive_;  // held while serving; clients see its release or our death
  // Shared with clients (see table.h); set once the table is published, read by the stats and
  // the ticker's threads.
  std::atomic<table::ClientCounters*> client_counters_{nullptr};

  LocalServer server_;
  std::unique_ptr<ThreadPool> peer_pool_, peer_stream_pool_;
  PeerServer peer_server_;            // after its pools: it stops (and waits for their tasks) first
  std::atomic<bool> serving_{false};  // peers are served once the share is staged
  bool created_local_ = false, created_run_ = false, created_output_ = false;
  bool have_local_ = false, have_run_ = false;  // ensured (created, or given and checked)
  // The launcher that --leave-local-dir leaves the files to: the parent at start.
  const pid_t launcher_ = ::getppid();
  AgentState state_ = AgentState::kStarting;
  std::string error_;
  mutable std::mutex state_mu_;

  // Counters.
  std::atomic<uint64_t> staged_bytes_{0}, staged_files_{0}, read_bytes_{0};
  // What this node stages, known after PlanStage: the shards' bytes (read_bytes_ counts
  // towards it) and their files (staged_files_ counts towards it).
  std::atomic<uint64_t> stage_bytes_total_{0}, stage_files_total_{0};
  std::atomic<double> stage_seconds_{0};  // written by the staging thread, read by stats
  double exchange_seconds_ = 0;
  // How the indexes travelled: "fence" (in PMIx's collective), "pmix" (direct modex) or "peers"
  // (gathered over the peer service); "" for a single agent.
  const char* exchange_via_ = "";
  // When the agent entered the exchange round it is in (steady clock, ns; 0: in none), for
  // status.json: a fence that never completes then shows as such, not as staging.
  std::atomic<int64_t> exchange_entered_ns_{0};
  std::atomic<double> cpu_ready_{0}, cpu_unpacked_{0};  // CpuSeconds() then (0: not yet)
  uint64_t exchange_bytes_ = 0;
  std::atomic<uint64_t> opens_local_{0}, open_errors_{0};

  // The samples for `fanstore stats --plot`, oldest first, at most kMaxSamples.
  struct Sample {
    double t;                        // seconds since the agent started
    std::array<uint64_t, 4> served;  // as ServedBytes
    uint64_t staged, read;           // staged_bytes_, read_bytes_
  };
  static constexpr size_t kMaxSamples = 3600;
  std::deque<Sample> series_;
  mutable std::mutex series_mu_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  // Held while status.json is written: the ticker's rewrite never lands after a new state.
  std::mutex status_write_mu_;
  std::thread ticker_;
  std::thread image_warmer_;
  std::atomic<bool> image_warmer_stop_{false};
  std::mutex ticker_mu_;
  std::condition_variable ticker_cv_;
  bool ticker_stop_ = false;

  // Set before any other thread starts, never reset: the stats read it from any thread.
  std::unique_ptr<output::Drainer> drainer_;

  // Last, so that they stop first: their threads use the members above.
  RemoteFiles remote_;
  Unpacker unpacker_;
  // The FUSE mounts of the tasks' kernel-visible views; first to stop: it opens files through
  // the two above.
  KernelView kernel_view_{view_, [this](const std::string& rel) { return Open(rel); }};
};

}  // namespace fanstore::agent
