// Files held on other nodes: opened from where this node keeps them (the cache, or their extents
// of the node's image), else fetched from a holder (one fetch for concurrent opens), else read
// straight from the shard in the dataset directory. Also the background prefetch that fetches
// whole remote shards ahead of the job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/cache.h"
#include "agent/index.h"
#include "agent/peer.h"
#include "common/status.h"
#include "format/format.h"
#include "format/manifest.h"
#include "format/shard.h"

namespace fanstore::agent {

class RemoteFiles {
 public:
  struct Context {
    const Index* index = nullptr;  // every shard's entries
    const format::Manifest* manifest = nullptr;
    const format::Dictionary* dict = nullptr;
    std::string dataset;  // DS.fs, for reads from the source
    uint32_t rank = 0, size = 1, replicas = 1;
    bool peers = true;              // fetch from other agents (else from the dataset)
    bool prefetch = true;           // stream whole remote shards into the cache in the background
    uint32_t prefetch_streams = 1;  // shards streamed at once (one thread each)
  };
  struct Counters {
    uint64_t opens_remote, opens_cached, opens_fallback;
    uint64_t bytes_remote, bytes_cached, bytes_fallback, peer_errors;
    uint64_t prefetched_shards, prefetched_files, prefetched_bytes;
    int source_peak;
    // Opens that waited for another's fetch of their file, and those of them that gave up
    // after kClaimWaitMs and fetched it themselves, into memory.
    uint64_t opens_waited, opens_waited_out;
  };
  // How long an open waits for another's fetch of its file (a prefetch stream's, or an open's)
  // before it fetches the file itself: a peer that trickles a byte now and then never trips
  // the I/O timeout, which bounds each receive, not a transfer.
  static constexpr int kClaimWaitMs = 10000;
  void SetClaimWaitForTest(int ms) { claim_wait_ms_ = ms; }
  // Reads from the dataset at once: when a peer stalls or dies, this node's opens of its files
  // fall back to the parallel file system, never more than this many at a time.
  static constexpr std::ptrdiff_t kMaxSourceReads = 4;

  RemoteFiles() = default;
  ~RemoteFiles() { Stop(); }
  RemoteFiles(const RemoteFiles&) = delete;
  RemoteFiles& operator=(const RemoteFiles&) = delete;

  // The cache in `cache_dir` (capacity 0: none), once the indexes are known.
  void Init(Context ctx, const std::string& cache_dir, uint64_t cache_capacity);

  // Where the node's EROFS image keeps the files it fetches (issue 31; agent/image_stage.cc):
  // the image was planned with every file of the dataset and its blob sized for them all, a
  // hole until written. A file's bytes go to its extent of the blob; once they are there and
  // verified, `keep` makes them visible (the table's kLocal: clients open them through the
  // mount) and `open` opens them. On a disk this costs no file per fetched file, to create or
  // to remove. Files without an extent still go to the cache.
  static constexpr uint64_t kNoExtent = UINT64_MAX;
  struct ImageExtents {
    int blob = -1;  // read-write; the caller keeps it open while this serves
    std::function<uint64_t(uint32_t shard, uint32_t entry)> extent;  // kNoExtent: not in it
    std::function<bool(uint32_t shard, uint32_t entry)> kept;
    std::function<void(uint32_t shard, uint32_t entry)> keep;
    std::function<Result<int>(uint32_t shard, uint32_t entry)> open;
  };
  // Before the first Open or prefetch.
  void UseImage(ImageExtents image) { image_ = std::move(image); }
  PeerClient& peers() { return peers_; }
  const FileCache& cache() const { return cache_; }

  // An open descriptor of the verified file (shard, entry): a cache file, or a sealed memfd.
  Result<int> Open(uint32_t shard, uint32_t entry);
  // Queues `shard` for a background bulk transfer into the cache, once, when it fits.
  void MaybePrefetch(uint32_t shard);
  // Stops and joins the prefetcher. Any thread, more than once.
  void Stop();
  Counters counters() const;

 private:
  struct Inflight;
  // Claims the fetch of file `key` (one writer per file at a time): null when another holds it,
  // whose claim then goes to *held (when given). Release wakes the openers waiting for it.
  std::shared_ptr<Inflight> TryClaim(uint64_t key, std::shared_ptr<Inflight>* held = nullptr);
  void Release(uint64_t key, std::shared_ptr<Inflight>* mine);
  // The file's extent in the image (kNoExtent: none, or no image).
  uint64_t ExtentOf(uint32_t shard, uint32_t entry) const {
    return image_.blob >= 0 ? image_.extent(shard, entry) : kNoExtent;
  }
  // A descriptor of the file where this node keeps it (its extent of the image, or the cache);
  // -1 when it is not kept.
  Result<int> OpenKept(uint32_t shard, uint32_t entry, uint64_t key);
  // Writes the file's verified content to `out` (from offset `extent`: its place in the image's
  // blob; kNoExtent: a file of its own), from a holder, then from the dataset. A failure to
  // write `out` ends the attempts and sets *local_error.
  Status FetchInto(uint32_t shard, uint32_t entry, int out, uint64_t extent, bool* local_error);
  // Fetches into the image or the cache (unless !keep: the claim is another's), else into a
  // memfd; `finish` wakes the openers waiting for us.
  Result<int> FetchNew(uint32_t shard, uint32_t entry, uint64_t key,
                       const std::function<void()>& finish, bool keep = true);
  Status ReadFromDataset(uint32_t shard, uint32_t entry,
                         const std::function<Status(std::string_view)>& sink);
  void PrefetchLoop();
  void PrefetchShard(uint32_t shard);

  Context ctx_;
  FileCache cache_;
  ImageExtents image_;
  PeerClient peers_;
  std::mutex inflight_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Inflight>> inflight_;
  std::mutex shard_fd_mu_;
  std::unordered_map<uint32_t, UniqueFD> shard_fds_;  // shards opened for reads from the source
  std::counting_semaphore<kMaxSourceReads> source_slots_{kMaxSourceReads};
  std::atomic<int> source_in_flight_{0}, source_peak_{0};
  std::mutex stop_mu_;  // Stop() from more than one thread
  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;
  std::vector<uint32_t> prefetch_queue_;
  std::vector<bool> prefetch_seen_;
  std::vector<uint64_t> shard_raw_bytes_;
  bool prefetch_stop_ = false;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> prefetchers_;  // started with the first shard queued
  std::atomic<uint64_t> opens_remote_{0}, opens_cached_{0}, opens_fallback_{0};
  std::atomic<uint64_t> bytes_remote_{0}, bytes_cached_{0}, bytes_fallback_{0}, peer_errors_{0};
  std::atomic<uint64_t> prefetched_files_{0}, prefetched_bytes_{0}, prefetched_shards_{0};
  std::atomic<uint64_t> opens_waited_{0}, opens_waited_out_{0};
  int claim_wait_ms_ = kClaimWaitMs;
};

}  // namespace fanstore::agent
