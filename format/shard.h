// Reading shards: open and validate, decode frames, and scan a whole shard sequentially.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "format/format.h"
#include "format/manifest.h"

struct ZSTD_DDict_s;
struct ZSTD_DCtx_s;

namespace fanstore {
class ThreadPool;
}

namespace fanstore::format {

// The dataset's zstd dictionary (if any), shared read-only by all decoders.
class Dictionary {
 public:
  Dictionary() = default;
  ~Dictionary();
  Dictionary(const Dictionary&) = delete;
  Dictionary& operator=(const Dictionary&) = delete;
  // Loads and checks dataset_dir/<ref.file>; an empty ref loads nothing.
  Status Load(const std::string& dataset_dir, const DictRef& ref);
  const ZSTD_DDict_s* ddict() const { return ddict_; }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
  ZSTD_DDict_s* ddict_ = nullptr;
};

// Decodes frames. One per thread (holds a zstd context).
class FrameDecoder {
 public:
  explicit FrameDecoder(const Dictionary* dict = nullptr);
  ~FrameDecoder();
  FrameDecoder(const FrameDecoder&) = delete;
  FrameDecoder& operator=(const FrameDecoder&) = delete;
  // Decodes `stored` for entry `e` and checks its XXH3. On success *raw views the content:
  // `stored` itself for raw frames, else *scratch, or with a null scratch this decoder's own
  // buffer (valid until its next Decode; no allocation per file). Errors name the path and
  // the frame offset.
  Status Decode(const IndexEntry& e, std::string_view stored, std::string* scratch,
                std::string_view* raw);

 private:
  const Dictionary* dict_;
  ZSTD_DCtx_s* dctx_;
  std::unique_ptr<char[]> buf_;
  size_t buf_cap_ = 0;
};

// One FrameDecoder per calling thread, for callbacks that run on a pool. Thread-safe.
class DecoderPool {
 public:
  explicit DecoderPool(const Dictionary* dict) : dict_(dict) {}
  FrameDecoder* Get();

 private:
  const Dictionary* dict_;
  std::mutex mu_;
  std::unordered_map<std::thread::id, std::unique_ptr<FrameDecoder>> per_thread_;
};

struct ShardFile {
  std::string path;
  UniqueFD fd;
  uint64_t size = 0;
  Header header;
  Footer footer;
  std::vector<IndexEntry> entries;
  std::string index_stored;  // the compressed index as read (published in the metadata exchange)
  bool parsed() const { return entries.size() == footer.entry_count; }  // entries are the index
};

// Opens a shard and reads its header, footer and index (three preads). When dataset_id is
// non-zero the shard must belong to that dataset. Errors are prefixed with the path. Without
// `parse`, the index is only read (index_stored), not decoded into entries: a caller that
// streams it (ForEachIndexEntry) checks it then.
Result<std::unique_ptr<ShardFile>> OpenShard(const std::string& path, uint64_t dataset_id,
                                             bool parse = true);
// Reads the index of an open shard (at its footer's place) into index_stored and, with
// `parse`, decodes it into entries: again after they were dropped.
Status ReadIndex(ShardFile* s, bool parse = true);
// The same decoded into a vector of the caller's, the shard left as it is (other threads may
// read it meanwhile): for one shard's index at a time.
Result<std::vector<IndexEntry>> ReadEntries(const ShardFile& s);
// A shard file `size` bytes long against its manifest entry; errors name `path`.
Status CheckShardSize(const std::string& path, uint64_t size, const ShardRef& ref);
// An opened shard against the manifest entry of shard `id`: size, then id.
Status CheckAgainstManifest(const ShardFile& sh, const ShardRef& ref, uint32_t id);
// Reads one entry's frame with a single pread from the shard open as `fd` (named `path` in
// errors), decodes and verifies it.
Status ReadFrame(int fd, const std::string& path, const IndexEntry& e, FrameDecoder* dec,
                 std::string* out);
// The content of a file, piece by piece, in order.
using Sink = std::function<Status(std::string_view piece)>;
// The same for a file of any size, without holding it in memory: reads the frame in 1 MiB
// pieces, decompresses as a stream (window at most 2^kMaxWindowLog), and hands the content to
// `sink` piece by piece; the length and XXH3 are checked at the end, so on an error (a
// Corruption naming the file and frame offset, or the sink's own) the caller must discard what
// the sink received. `on_stored`, when set, sees each stored piece read, with its shard offset.
Status StreamFrame(int fd, const std::string& path, const IndexEntry& e, const Dictionary* dict,
                   const Sink& sink,
                   const std::function<void(uint64_t off, std::string_view)>& on_stored = nullptr);
inline Status ReadEntry(const ShardFile& shard, const IndexEntry& e, FrameDecoder* dec,
                        std::string* out) {
  return ReadFrame(shard.fd.get(), shard.path, e, dec, out);
}

// Called for each file or symlink entry with its stored frame bytes; may run on pool threads.
using FrameFn = std::function<Status(const IndexEntry& e, std::string_view stored)>;
// For a file too large to hold (raw or stored size above kStreamAbove): called on the scanning
// thread, in shard order, with `decode`, which reads the frame in pieces (feeding the
// whole-shard hash) and streams the verified content to its sink (StreamFrame). When the
// callback does not call decode, the scan does, with a sink that drops the content.
using DecodeFn = std::function<Status(const Sink& sink)>;
using StreamFn = std::function<Status(const IndexEntry& e, const DecodeFn& decode)>;

struct ScanOptions {
  ThreadPool* pool = nullptr;     // null: callbacks run on the calling thread
  size_t chunk_bytes = 1u << 20;  // sequential read size: large for a parallel file system,
                                  // small enough to stay in cache while it is hashed
  uint64_t expect_file_xxh3 = 0;  // checked when check_file_hash is set
  bool check_file_hash = false;
  std::function<void(uint64_t bytes)> on_read;  // progress, called from the scanning thread
  // Large files: with `stream` set they go to it (decoded with `dict`), never to the FrameFn;
  // without, they reach the FrameFn whole like any other (memory grows with the file).
  StreamFn stream;
  const Dictionary* dict = nullptr;
  // The shard's index, decoded by the caller (ReadEntries); null: the shard's own entries.
  const std::vector<IndexEntry>* entries = nullptr;
};

// Reads the shard front to back with large sequential reads, hashing the whole file, and hands
// every frame to `fn` (in parallel when a pool is given). Returns the first error.
Status ScanShard(const ShardFile& shard, const ScanOptions& opts, const FrameFn& fn);

// ScanShard over several shards of the dataset described by `m`, each checked against the
// manifest's whole-file hash for its shard id, on the pool's threads. With at least as many shards
// as threads, each thread scans whole shards on its own with 256 KiB reads (read, hash, decode and
// write back to back while the chunk is in its core's cache, no hand-offs: 1.4x the rate of 1 MiB
// chunks through the pool, V1); with fewer, one shard at a time is spread over the pool. on_read
// (thread-safe) reports progress; `cancel` stops between shards. The error returned is that of the
// lowest-numbered failing shard, whatever the thread timing. `stream` and `dict` as in ScanOptions:
// with a stream callback, memory stays bounded whatever the size of the files.
Status ScanShards(const Manifest& m, const std::vector<const ShardFile*>& shards, ThreadPool* pool,
                  const std::function<void(uint64_t)>& on_read, const std::atomic<bool>* cancel,
                  const FrameFn& fn, const StreamFn& stream = nullptr,
                  const Dictionary* dict = nullptr);
// The same schedule with the work per shard given: scan(i, so) is called for shards[i], on the
// thread that scans it, with the options ScanShards would use (so.pool set or not), and does
// what it will with them (ScanShards' own: ScanShard(*shards[i], so, fn)).
using ShardScanFn = std::function<Status(size_t i, const ScanOptions& so)>;
Status ForEachShard(const Manifest& m, const std::vector<const ShardFile*>& shards,
                    ThreadPool* pool, const std::function<void(uint64_t)>& on_read,
                    const std::atomic<bool>* cancel, const ShardScanFn& scan,
                    const StreamFn& stream = nullptr, const Dictionary* dict = nullptr);

}  // namespace fanstore::format
