// Lazy unpack: the node's shards were copied as they are, the agent reported ready, and their
// files are now unpacked into the data root in the background. A file opened before its turn
// is unpacked for its opener on the spot; each file is unpacked exactly once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/index.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "format/format.h"
#include "format/manifest.h"
#include "format/shard.h"

namespace fanstore::agent {

class Unpacker {
 public:
  struct Context {
    const Index* index = nullptr;  // every shard's frames, with the table
    const format::Dictionary* dict = nullptr;
    const format::Manifest* manifest = nullptr;
    int data_root_fd = -1;
    std::string data_root;  // where the files go
    std::string copy_dir;   // the shard copies, removed once every file is out
    size_t threads = 1;
    // A file is complete: `table_entry` may be marked local; `bytes` counts as staged.
    std::function<void(uint32_t table_entry, uint64_t bytes)> on_file;
    // Every file is out (status.json says so).
    std::function<void()> on_done;
  };

  Unpacker() = default;
  ~Unpacker() { Stop(); }
  Unpacker(const Unpacker&) = delete;
  Unpacker& operator=(const Unpacker&) = delete;

  // Lazy mode: the state of the files of the local shards `mine`, all still packed.
  void Init(Context ctx, const std::vector<uint32_t>& mine);
  // The shard copy the files are unpacked from (opened and checked; its entries are read again
  // when it is unpacked).
  void Adopt(std::unique_ptr<format::ShardFile> copy);
  // Starts the background pass, at low priority.
  void Start();
  // Stops and joins the background pass. Any thread, more than once.
  void Stop();
  // Eager mode: every file was unpacked before ready.
  void SetDone() { done_ = true; }
  bool done() const { return done_.load(); }

  // Makes the file exist under the data root, unpacking it now unless it is already (a file
  // another thread is unpacking is waited for).
  Status EnsureUnpacked(uint32_t shard, uint32_t entry);

  uint64_t on_demand() const { return on_demand_.load(); }
  double seconds() const { return seconds_.load(); }

 private:
  enum : uint8_t { kPacked = 0, kBusy = 1, kDone = 2 };

  // True when the caller must unpack the file (it is then marked busy); with `wait` it waits
  // for a busy file, else it leaves it.
  bool Claim(uint32_t shard, uint32_t entry, bool wait);
  void Finish(uint32_t shard, uint32_t entry, bool ok);
  Status UnpackShard(uint32_t s, ThreadPool* workers, format::DecoderPool* decoders);
  void Loop();

  Context ctx_;
  std::vector<std::unique_ptr<format::ShardFile>> copies_;  // by shard id
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<uint8_t>> state_;  // by shard, entry
  std::atomic<bool> done_{false}, stop_{false};
  std::atomic<uint64_t> on_demand_{0};
  std::atomic<double> seconds_{0};
  std::thread thread_;
};

// Background work yields to the job's processes (nice is per thread on Linux); once per thread.
void LowerThreadPriority();

}  // namespace fanstore::agent
