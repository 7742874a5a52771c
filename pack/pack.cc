// The packer: walk, plan balanced shards, compress and hash on all cores, write atomically.
#include "pack/pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zdict.h>
#include <zstd.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>

#include "common/hash.h"
#include "common/io.h"
#include "common/path.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"
#include "format/format.h"
#include "format/manifest.h"
#include "pack/archive.h"
#include "pack/core.h"
#include "pack/shard_out.h"
#include "pack/walk.h"

namespace fanstore::pack {
namespace {

using format::EntryType;

struct Batch {
  uint32_t shard;
  std::vector<uint32_t> files;  // indices into the entry list
  uint64_t bytes = 0;
  bool big = false;  // one file too large to hold: streamed by the writer (WriteBig)
};

class Packer : PackCore {
 public:
  Packer(std::string src, std::string tmp, const Options& o, mode_t dir_mode)
      : PackCore(std::move(tmp), o, dir_mode), src_(std::move(src)) {}

  Status Run(Stats* stats);

 private:
  void Plan();
  Status TrainDict();
  BatchOut Process(const Batch& b);
  Status WriteShards();
  Status AppendBatch(ShardOut& shard, const Batch& b, BatchOut out);

  std::string src_;
  std::vector<SrcEntry> entries_;
  std::vector<uint32_t> files_;  // indices of regular files
  uint32_t nshards_ = 1;
  std::vector<Batch> batches_;
  std::string dict_;
};

void Packer::Plan() {
  for (uint32_t i = 0; i < entries_.size(); i++)
    if (entries_[i].type == EntryType::kFile) {
      files_.push_back(i);
      raw_total_ += entries_[i].size;
    }
  files_total_ = files_.size();
  const uint64_t target = std::max<uint64_t>(opts_.shard_size, 1);
  const uint64_t per = std::max<uint64_t>(opts_.shard_files, 1);
  nshards_ = static_cast<uint32_t>(
      std::max<uint64_t>({1, (raw_total_ + target - 1) / target, (files_.size() + per - 1) / per}));
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
  for (uint32_t s = 0; s < nshards_; s++) {
    auto& v = per_shard[s];
    std::sort(v.begin(), v.end());
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
  BatchOut out;
  if (b.big) return out;  // the writer streams it
  std::string raw, comp, xattrs;
  for (uint32_t f : b.files) {
    const SrcEntry& e = entries_[f];
    out.status = ReadWhole(Join(src_, e.rel), e, &raw, &xattrs);
    if (!out.status.ok()) return out;
    CompressFile(e, raw, &comp, &out);
    out.entries.back().xattrs = format::XattrList(xattrs);
  }
  return out;
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

// A compressed batch, or for a big one its file streamed now, appended to the shard.
Status Packer::AppendBatch(ShardOut& shard, const Batch& b, BatchOut out) {
  if (!b.big) return PackCore::AppendBatch(shard, std::move(out));
  const SrcEntry& e = entries_[b.files[0]];
  BigSource src;
  src.path = Join(src_, e.rel);
  auto opened = OpenSource(src.path, e);
  if (!opened.ok()) return opened.status();
  src.fd = std::move(opened).value();
  SrcEntry with = e;  // its attributes, read with its bytes as for the small files
  FS_RETURN_IF_ERROR(ReadXattrs(src.fd.get(), src.path, &with.xattrs));
  return AppendBig(shard, src, with);
}

Status Packer::WriteShards() {
  const size_t threads = opts_.threads ? opts_.threads : ThreadPool::DefaultThreads();
  BatchPipeline pipeline(batches_.size(), threads,
                         [this](size_t i) { return Process(batches_[i]); });
  ShardOut shard;
  uint32_t open_shard = UINT32_MAX;
  for (size_t i = 0; i < batches_.size(); i++) {
    const Batch& b = batches_[i];
    if (b.shard != open_shard) {
      if (open_shard != UINT32_MAX) FS_RETURN_IF_ERROR(FinishShard(shard, open_shard));
      open_shard = b.shard;
      FS_RETURN_IF_ERROR(OpenShard(&shard, open_shard));
      // Shard 0 also carries every directory and symlink of the namespace.
      if (open_shard == 0) FS_RETURN_IF_ERROR(AppendNonFiles(shard, entries_));
    }
    std::optional<BatchOut> out = pipeline.Take(i, [this] { return Cancelled(); });
    if (!out) return Status::Aborted("interrupted");
    FS_RETURN_IF_ERROR(out->status);
    FS_RETURN_IF_ERROR(AppendBatch(shard, b, std::move(*out)));
  }
  return open_shard == UINT32_MAX ? Status::OK() : FinishShard(shard, open_shard);
}

Status Packer::Run(Stats* stats) {
  SourceTree tree;
  FS_RETURN_IF_ERROR(WalkSource(src_, opts_, &tree));
  entries_ = std::move(tree.entries);
  Plan();
  if (opts_.dict && opts_.level > 0) FS_RETURN_IF_ERROR(TrainDict());
  manifest_.shards.resize(nshards_);
  FS_RETURN_IF_ERROR(WriteShards());
  uint64_t dirs = 0, symlinks = 0;
  for (const auto& e : entries_) {
    dirs += e.type == EntryType::kDir;
    symlinks += e.type == EntryType::kSymlink;
  }
  return WriteManifest(tree, files_.size(), dirs, symlinks, stats);
}

// The sources' kind, and the mode of the dataset directory: readable by no more users than the
// tree or archive it packs (a private source gives a private dataset, whatever the destination
// directory; the umask applies too).
Status CheckSources(const std::vector<std::string>& srcs, bool* tree, mode_t* dir_mode) {
  if (srcs.empty()) return Status::InvalidArgument("nothing to pack");
  *dir_mode = 0755;
  *tree = false;
  size_t stdin_uses = 0;
  for (const std::string& src : srcs) {
    struct stat st;
    if (src == "-") {
      stdin_uses++;
      continue;
    }
    if (::stat(src.c_str(), &st) != 0) return Status::FromErrno("source " + src, errno);
    if (S_ISDIR(st.st_mode)) {
      if (srcs.size() > 1)
        return Status::InvalidArgument(
            "source " + src + " is a directory: pack one directory, or one or more archives");
      *tree = true;
      *dir_mode = (st.st_mode & 0755) | 0700;
      return Status::OK();
    }
    if (S_ISSOCK(st.st_mode))
      return Status::InvalidArgument("source " + src + " is neither a directory nor an archive");
    // Read bits of the archive become read and search bits of the dataset directory.
    const mode_t r = st.st_mode & 0044;
    *dir_mode &= 0700 | r | (r >> 2);
  }
  if (stdin_uses > 0 && srcs.size() > 1)
    return Status::InvalidArgument("standard input (-) is packed alone, without other sources");
  return Status::OK();
}

}  // namespace

Status Pack(const std::vector<std::string>& srcs, const std::string& dst, const Options& opts,
            Stats* stats) {
  bool tree = false;
  mode_t dir_mode = 0700;
  FS_RETURN_IF_ERROR(CheckSources(srcs, &tree, &dir_mode));
  const std::string d = TrimTrailingSlashes(dst);
  struct stat st;
  if (::lstat(d.c_str(), &st) == 0)
    return Status::InvalidArgument(d + " already exists; remove it or choose another name");
  const std::string tmp = d + ".tmp-" + std::to_string(::getpid());
  if (::mkdir(tmp.c_str(), dir_mode) != 0) return Status::FromErrno("create " + tmp, errno);
  Status s;
  if (tree) {
    Packer p(srcs[0], tmp, opts, dir_mode);
    s = p.Run(stats);
  } else {
    s = PackArchives(srcs, tmp, opts, dir_mode, stats);
  }
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
