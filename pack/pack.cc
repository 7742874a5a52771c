// The packer: walk, plan balanced shards, compress and hash on all cores, write atomically.
#include "pack/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zdict.h>
#include <zstd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>

#include "common/hash.h"
#include "common/io.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"
#include "format/format.h"
#include "format/manifest.h"
#include "pack/shard_out.h"
#include "pack/walk.h"

namespace fanstore::pack {
namespace {

using format::Codec;
using format::EntryType;
using format::IndexEntry;

struct Batch {
  uint32_t shard;
  std::vector<uint32_t> files;  // indices into the entry list
  uint64_t bytes = 0;
  bool big = false;  // one file too large to hold: streamed by the writer (WriteBig)
};

struct BatchOut {
  Status status;
  std::string data;
  std::vector<IndexEntry> entries;  // offsets relative to the batch start
};

struct ZstdCtx {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ~ZstdCtx() { ZSTD_freeCCtx(c); }
};

struct BigSource;

class Packer {
 public:
  Packer(std::string src, std::string tmp, const Options& o, mode_t dir_mode)
      : src_(std::move(src)), tmp_(std::move(tmp)), opts_(o), dir_mode_(dir_mode) {}
  ~Packer() { ZSTD_freeCDict(cdict_); }

  Status Run(Stats* stats);

 private:
  bool Cancelled() const { return opts_.cancel && opts_.cancel->load(); }
  // The dataset's files are readable by whom its directory is (no execute bits).
  mode_t FileMode() const { return (dir_mode_ & 0644) | 0600; }
  void Plan();
  Status TrainDict();
  BatchOut Process(const Batch& b);
  Status WriteShards();
  Status StartShard(ShardOut* shard, uint32_t id);
  Status AppendBatch(ShardOut& shard, const Batch& b, BatchOut out);
  Status WriteBig(ShardOut& shard, const SrcEntry& e, IndexEntry* ie);
  bool SampleCompresses(BigSource& src, uint64_t size);
  Status WriteBigZstd(ShardOut& shard, BigSource& src, const SrcEntry& e, IndexEntry* ie,
                      bool* smaller);

  std::string src_, tmp_;
  const Options& opts_;
  mode_t dir_mode_;
  std::vector<SrcEntry> entries_;
  std::vector<uint32_t> files_;  // indices of regular files
  uint32_t nshards_ = 1;
  std::vector<Batch> batches_;
  std::vector<uint64_t> shard_files_;
  ZSTD_CDict* cdict_ = nullptr;
  std::string dict_;
  uint64_t dataset_id_ = 0;
  format::Manifest manifest_;
  uint64_t raw_total_ = 0;
  uint64_t done_bytes_ = 0, done_files_ = 0;  // written so far, for progress
};

void Packer::Plan() {
  for (uint32_t i = 0; i < entries_.size(); i++)
    if (entries_[i].type == EntryType::kFile) {
      files_.push_back(i);
      raw_total_ += entries_[i].size;
    }
  uint64_t target = std::max<uint64_t>(opts_.shard_size, 1);
  nshards_ = static_cast<uint32_t>(std::max<uint64_t>(1, (raw_total_ + target - 1) / target));
  nshards_ =
      std::min<uint32_t>(nshards_, std::max<uint32_t>(1, static_cast<uint32_t>(files_.size())));
  // Longest-processing-time first: largest files to the least-loaded shard balances bytes.
  std::vector<uint32_t> by_size = files_;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](uint32_t a, uint32_t b) { return entries_[a].size > entries_[b].size; });
  using Load = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (uint32_t s = 0; s < nshards_; s++) heap.push({0, s});
  std::vector<std::vector<uint32_t>> per_shard(nshards_);
  for (uint32_t f : by_size) {
    auto [load, s] = heap.top();
    heap.pop();
    per_shard[s].push_back(f);
    heap.push({load + entries_[f].size + 64, s});
  }
  // Within a shard, files keep path order (entries_ is in walk order) for locality.
  shard_files_.assign(nshards_, 0);
  for (uint32_t s = 0; s < nshards_; s++) {
    auto& v = per_shard[s];
    std::sort(v.begin(), v.end());
    shard_files_[s] = v.size();
    Batch b{s, {}, 0};
    for (uint32_t f : v) {
      if (entries_[f].size > format::kStreamAbove) {
        // Streamed straight into the shard by the writer, in bounded memory.
        if (!b.files.empty()) batches_.push_back(std::move(b));
        batches_.push_back(Batch{s, {f}, entries_[f].size, true});
        b = Batch{s, {}, 0};
        continue;
      }
      b.files.push_back(f);
      b.bytes += entries_[f].size;
      if (b.bytes >= (4u << 20) || b.files.size() >= 256) {
        batches_.push_back(std::move(b));
        b = Batch{s, {}, 0};
      }
    }
    if (!b.files.empty() || v.empty() || batches_.empty() || batches_.back().shard != s)
      batches_.push_back(std::move(b));
  }
}

Status Packer::TrainDict() {
  // Samples: small files only, up to 100 MiB in total.
  std::vector<uint32_t> small;
  for (uint32_t f : files_)
    if (entries_[f].size > 0 && entries_[f].size <= (128u << 10)) small.push_back(f);
  if (small.size() < 64) {
    if (opts_.warn) opts_.warn("--dict: fewer than 64 small files; packing without a dictionary");
    return Status::OK();
  }
  size_t step = std::max<size_t>(1, small.size() / 20000);
  std::string samples;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < small.size() && samples.size() < (100u << 20); i += step) {
    std::string data;
    FS_RETURN_IF_ERROR(ReadWhole(Join(src_, entries_[small[i]].rel), entries_[small[i]], &data));
    samples += data;
    sizes.push_back(data.size());
  }
  std::string dict(112640, '\0');
  size_t n = ZDICT_trainFromBuffer(dict.data(), dict.size(), samples.data(), sizes.data(),
                                   static_cast<unsigned>(sizes.size()));
  if (ZDICT_isError(n)) {
    if (opts_.warn)
      opts_.warn(std::string("--dict: training failed (") + ZDICT_getErrorName(n) +
                 "); packing without a dictionary");
    return Status::OK();
  }
  dict.resize(n);
  dict_ = std::move(dict);
  // At most level 19: higher levels use windows larger than a reader accepts (kMaxWindowLog).
  cdict_ = ZSTD_createCDict(dict_.data(), dict_.size(), std::min(std::max(opts_.level, 1), 19));
  FS_RETURN_IF_ERROR(WriteFileAtomic(tmp_ + "/" + format::kDictName, dict_, FileMode()));
  manifest_.dict = {format::kDictName, dict_.size(), Xxh3(dict_),
                    ZDICT_getDictID(dict_.data(), dict_.size())};
  return Status::OK();
}

BatchOut Packer::Process(const Batch& b) {
  thread_local ZstdCtx ctx;
  BatchOut out;
  if (b.big) return out;  // the writer streams it
  std::string raw, comp;
  for (uint32_t f : b.files) {
    const SrcEntry& e = entries_[f];
    out.status = ReadWhole(Join(src_, e.rel), e, &raw);
    if (!out.status.ok()) return out;
    IndexEntry ie;
    ie.type = EntryType::kFile;
    ie.mode = e.mode;
    ie.size = e.size;
    ie.mtime_ns = e.mtime_ns;
    ie.xxh3 = Xxh3(raw);
    ie.path = e.rel;
    ie.offset = out.data.size();
    ie.codec = Codec::kRaw;
    if (opts_.level > 0 && raw.size() >= 64) {
      comp.resize(ZSTD_compressBound(raw.size()));
      size_t n = cdict_ ? ZSTD_compress_usingCDict(ctx.c, comp.data(), comp.size(), raw.data(),
                                                   raw.size(), cdict_)
                        : ZSTD_compressCCtx(ctx.c, comp.data(), comp.size(), raw.data(), raw.size(),
                                            opts_.level);
      if (!ZSTD_isError(n) && n < raw.size()) {
        ie.codec = cdict_ ? Codec::kZstdDict : Codec::kZstd;
        out.data.append(comp.data(), n);
      }
    }
    if (ie.codec == Codec::kRaw) out.data.append(raw);
    ie.stored_len = out.data.size() - ie.offset;
    out.entries.push_back(std::move(ie));
  }
  return out;
}

// A large source file, read in 1 MiB pieces into one buffer.
struct BigSource {
  static constexpr size_t kPiece = 1u << 20;
  std::string path;
  UniqueFD fd;
  std::unique_ptr<char[]> in{new char[kPiece]};

  Status ReadAt(uint64_t off, size_t n) {
    Status rs = PreadFull(fd.get(), in.get(), n, off, path);
    return rs.ok() ? rs : Status::IOError(path + " changed while packing: " + rs.message());
  }
};

// Whether the file's first 128 KiB compress: an incompressible file (media) is not compressed
// twice.
bool Packer::SampleCompresses(BigSource& src, uint64_t size) {
  if (opts_.level <= 0) return false;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, 128u << 10));
  if (!src.ReadAt(0, n).ok()) return true;  // the compressing pass reports the error
  thread_local ZstdCtx ctx;
  std::string comp(ZSTD_compressBound(n), '\0');
  size_t c =
      cdict_ ? ZSTD_compress_usingCDict(ctx.c, comp.data(), comp.size(), src.in.get(), n, cdict_)
             : ZSTD_compressCCtx(ctx.c, comp.data(), comp.size(), src.in.get(), n, opts_.level);
  return !ZSTD_isError(c) && c < n;
}

// The file as one zstd frame (content size set), written as it is compressed. *smaller is false,
// and the shard rolled back, when the frame is no smaller than the file.
Status Packer::WriteBigZstd(ShardOut& shard, BigSource& src, const SrcEntry& e, IndexEntry* ie,
                            bool* smaller) {
  const ShardOut::Mark mark = shard.GetMark();
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (!cctx) return Status::IOError("zstd: out of memory");
  ZSTD_CCtx* c = cctx.get();
  if (cdict_) {
    ZSTD_CCtx_refCDict(c, cdict_);
  } else {
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, opts_.level);
    // A reader's streaming decoder accepts windows up to 2^kMaxWindowLog (levels up to 19 stay
    // within it).
    if (opts_.level > 19) ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, format::kMaxWindowLog);
  }
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
  ZSTD_CCtx_setPledgedSrcSize(c, e.size);
  std::unique_ptr<char[]> out(new char[ZSTD_CStreamOutSize()]);
  // One call of the compressor; what it produced goes to the shard. *left: what remains to flush.
  auto step = [&](ZSTD_inBuffer* ib, ZSTD_EndDirective mode, size_t* left) {
    ZSTD_outBuffer ob{out.get(), ZSTD_CStreamOutSize(), 0};
    *left = ZSTD_compressStream2(c, &ob, ib, mode);
    if (ZSTD_isError(*left))
      return Status::IOError(src.path + ": zstd: " + ZSTD_getErrorName(*left));
    return ob.pos ? shard.Write(std::string_view(out.get(), ob.pos)) : Status::OK();
  };
  Xxh3Stream hash;
  size_t left = 0;
  for (uint64_t off = 0; off < e.size;) {
    if (Cancelled()) return Status::Aborted("interrupted");
    const size_t n = static_cast<size_t>(std::min<uint64_t>(BigSource::kPiece, e.size - off));
    FS_RETURN_IF_ERROR(src.ReadAt(off, n));
    hash.Update(src.in.get(), n);
    ZSTD_inBuffer ib{src.in.get(), n, 0};
    while (ib.pos < ib.size) FS_RETURN_IF_ERROR(step(&ib, ZSTD_e_continue, &left));
    off += n;
  }
  do {
    ZSTD_inBuffer none{nullptr, 0, 0};
    FS_RETURN_IF_ERROR(step(&none, ZSTD_e_end, &left));
  } while (left != 0);
  *smaller = shard.pos() - ie->offset < e.size;
  if (!*smaller) return shard.Rollback(mark);
  ie->codec = cdict_ ? Codec::kZstdDict : Codec::kZstd;
  ie->stored_len = shard.pos() - ie->offset;
  ie->xxh3 = hash.Digest();
  return Status::OK();
}

// A file larger than kStreamAbove, read, hashed, compressed and written in pieces, so its size
// never shows in memory. Compressed when its first 128 KiB compress; if the whole frame then
// turns out no smaller, it is written again raw.
Status Packer::WriteBig(ShardOut& shard, const SrcEntry& e, IndexEntry* ie) {
  BigSource src;
  src.path = Join(src_, e.rel);
  auto opened = OpenSource(src.path, e);
  if (!opened.ok()) return opened.status();
  src.fd = std::move(opened).value();
  ::posix_fadvise(src.fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  ie->type = EntryType::kFile;
  ie->mode = e.mode;
  ie->size = e.size;
  ie->mtime_ns = e.mtime_ns;
  ie->path = e.rel;
  ie->offset = shard.pos();
  bool smaller = false;
  if (SampleCompresses(src, e.size)) FS_RETURN_IF_ERROR(WriteBigZstd(shard, src, e, ie, &smaller));
  if (smaller) return Status::OK();
  Xxh3Stream hash;
  for (uint64_t off = 0; off < e.size;) {
    if (Cancelled()) return Status::Aborted("interrupted");
    const size_t n = static_cast<size_t>(std::min<uint64_t>(BigSource::kPiece, e.size - off));
    FS_RETURN_IF_ERROR(src.ReadAt(off, n));
    hash.Update(src.in.get(), n);
    FS_RETURN_IF_ERROR(shard.Write(std::string_view(src.in.get(), n)));
    off += n;
  }
  ie->codec = Codec::kRaw;
  ie->stored_len = e.size;
  ie->xxh3 = hash.Digest();
  return Status::OK();
}

// Batches compressed on worker threads, at most a window ahead of the writer, which takes
// them in order.
class BatchPipeline {
 public:
  BatchPipeline(size_t batches, size_t threads, std::function<BatchOut(size_t)> process)
      : slots_(batches), window_(threads * 3), process_(std::move(process)) {
    for (size_t t = 0; t < threads; t++) workers_.emplace_back([this] { Work(); });
  }
  ~BatchPipeline() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  // Batch i's output, once ready; nothing when `cancelled` turns true first.
  std::optional<BatchOut> Take(size_t i, const std::function<bool()>& cancelled) {
    std::optional<BatchOut> out;
    {
      std::unique_lock<std::mutex> l(mu_);
      while (!slots_[i].has_value()) {
        if (cancelled()) return out;
        cv_.wait_for(l, std::chrono::milliseconds(100));
      }
      out = std::move(slots_[i]);
      slots_[i].reset();
      consumed_ = i + 1;
    }
    cv_.notify_all();
    return out;
  }

 private:
  void Work() {
    while (true) {
      size_t i = next_++;
      if (i >= slots_.size()) return;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || i < consumed_ + window_; });
        if (stop_) return;
      }
      BatchOut out = process_(i);
      std::lock_guard<std::mutex> l(mu_);
      slots_[i] = std::move(out);
      cv_.notify_all();
    }
  }

  std::vector<std::optional<BatchOut>> slots_;
  const size_t window_;
  std::function<BatchOut(size_t)> process_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t consumed_ = 0;
  bool stop_ = false;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> workers_;
};

// Opens shard `id`; shard 0 also carries every directory and symlink of the namespace.
Status Packer::StartShard(ShardOut* shard, uint32_t id) {
  manifest_.shards[id].file = ShardName(id);
  manifest_.shards[id].files = shard_files_[id];
  FS_RETURN_IF_ERROR(shard->Open(tmp_ + "/" + ShardName(id), id, dataset_id_));
  if (id != 0) return Status::OK();
  for (const auto& e : entries_) {
    if (e.type == EntryType::kFile) continue;
    IndexEntry ie;
    ie.type = e.type;
    ie.mode = e.mode;
    ie.mtime_ns = e.mtime_ns;
    ie.path = e.rel;
    if (e.type == EntryType::kSymlink) {
      ie.size = ie.stored_len = e.target.size();
      ie.xxh3 = Xxh3(e.target);
      ie.offset = shard->pos();
      FS_RETURN_IF_ERROR(shard->Write(e.target));
    }
    shard->entries().push_back(std::move(ie));
  }
  return Status::OK();
}

// A compressed batch (or, for a big one, its file streamed now) appended to the shard.
Status Packer::AppendBatch(ShardOut& shard, const Batch& b, BatchOut out) {
  const uint64_t base = shard.pos();
  if (b.big) {
    IndexEntry ie;
    FS_RETURN_IF_ERROR(WriteBig(shard, entries_[b.files[0]], &ie));
    ie.offset -= base;  // relative, like a batch's (made absolute below)
    out.entries.push_back(std::move(ie));
  } else {
    FS_RETURN_IF_ERROR(shard.Write(out.data));
  }
  for (auto& e : out.entries) {
    e.offset += base;
    done_bytes_ += e.size;
    manifest_.stored_bytes += e.stored_len;
    shard.entries().push_back(std::move(e));
  }
  done_files_ += out.entries.size();
  if (opts_.progress) opts_.progress(done_bytes_, raw_total_, done_files_, files_.size());
  return Status::OK();
}

Status Packer::WriteShards() {
  const size_t threads = opts_.threads ? opts_.threads : ThreadPool::DefaultThreads();
  BatchPipeline pipeline(batches_.size(), threads,
                         [this](size_t i) { return Process(batches_[i]); });
  ShardOut shard(FileMode());
  uint32_t open_shard = UINT32_MAX;
  for (size_t i = 0; i < batches_.size(); i++) {
    const Batch& b = batches_[i];
    if (b.shard != open_shard) {
      if (open_shard != UINT32_MAX)
        FS_RETURN_IF_ERROR(shard.Finish(opts_.sync, &manifest_.shards[open_shard]));
      shard = ShardOut(FileMode());
      open_shard = b.shard;
      FS_RETURN_IF_ERROR(StartShard(&shard, open_shard));
    }
    std::optional<BatchOut> out = pipeline.Take(i, [this] { return Cancelled(); });
    if (!out) return Status::Aborted("interrupted");
    FS_RETURN_IF_ERROR(out->status);
    FS_RETURN_IF_ERROR(AppendBatch(shard, b, std::move(*out)));
  }
  return open_shard == UINT32_MAX ? Status::OK()
                                  : shard.Finish(opts_.sync, &manifest_.shards[open_shard]);
}

Status Packer::Run(Stats* stats) {
  SourceTree tree;
  FS_RETURN_IF_ERROR(WalkSource(src_, opts_, &tree));
  entries_ = std::move(tree.entries);
  if (::getrandom(&dataset_id_, sizeof dataset_id_, 0) != sizeof dataset_id_ || dataset_id_ == 0)
    dataset_id_ =
        static_cast<uint64_t>(::time(nullptr)) ^ (static_cast<uint64_t>(::getpid()) << 32) ^ 1;
  Plan();
  if (opts_.dict && opts_.level > 0) FS_RETURN_IF_ERROR(TrainDict());
  manifest_.shards.resize(nshards_);
  FS_RETURN_IF_ERROR(WriteShards());

  manifest_.version = format::kVersion;
  manifest_.tool_version = FANSTORE_VERSION;
  char created[32];
  time_t now = ::time(nullptr);
  struct tm tm;
  ::gmtime_r(&now, &tm);
  std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  manifest_.created = created;
  manifest_.dataset_id = dataset_id_;
  manifest_.level = opts_.level;
  manifest_.codec = opts_.level > 0 ? "zstd" : "raw";
  for (const auto& e : entries_) {
    manifest_.files += e.type == EntryType::kFile;
    manifest_.dirs += e.type == EntryType::kDir;
    manifest_.symlinks += e.type == EntryType::kSymlink;
  }
  manifest_.raw_bytes = raw_total_;
  manifest_.root_mode = tree.root_mode;
  manifest_.root_mtime_ns = tree.root_mtime_ns;
  FS_RETURN_IF_ERROR(WriteFileAtomic(tmp_ + "/" + format::kManifestName,
                                     format::ManifestToJson(manifest_), FileMode()));
  if (stats) {
    stats->files = manifest_.files;
    stats->dirs = manifest_.dirs;
    stats->symlinks = manifest_.symlinks;
    stats->skipped = tree.skipped;
    stats->shards = nshards_;
    stats->raw_bytes = raw_total_;
    stats->stored_bytes = manifest_.stored_bytes;
    stats->dict_used = cdict_ != nullptr;
  }
  return Status::OK();
}

}  // namespace

Status Pack(const std::string& src, const std::string& dst, const Options& opts, Stats* stats) {
  std::string d = dst;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  struct stat st;
  if (::lstat(d.c_str(), &st) == 0)
    return Status::InvalidArgument(d + " already exists; remove it or choose another name");
  const std::string tmp = d + ".tmp-" + std::to_string(::getpid());
  // The dataset is readable by no more users than the tree it packs: a private source tree
  // (0700) gives a private dataset, whatever the destination directory (the umask applies too).
  struct stat sst;
  const mode_t dir_mode = ::stat(src.c_str(), &sst) == 0 ? ((sst.st_mode & 0755) | 0700) : 0700;
  if (::mkdir(tmp.c_str(), dir_mode) != 0) return Status::FromErrno("create " + tmp, errno);
  Packer p(src, tmp, opts, dir_mode);
  Status s = p.Run(stats);
  if (s.ok() && opts.sync) {
    UniqueFD dfd(::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd.valid()) ::fsync(dfd.get());
  }
  if (s.ok() && ::rename(tmp.c_str(), d.c_str()) != 0)
    s = Status::FromErrno("rename " + tmp + " to " + d, errno);
  if (!s.ok()) {
    Status r = RemoveTree(tmp);
    (void)r;
  }
  return s;
}

}  // namespace fanstore::pack
