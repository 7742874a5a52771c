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
#include "common/unique_fd.h"
#include "format/format.h"
#include "common/io.h"
#include "format/manifest.h"
#include "common/thread_pool.h"

namespace fanstore::pack {
namespace {

using format::Codec;
using format::EntryType;
using format::IndexEntry;

struct SrcEntry {
  std::string rel;
  EntryType type;
  uint32_t mode;
  uint64_t size;
  int64_t mtime_ns;
  std::string target;  // symlinks
};

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return b.empty() ? a : a + "/" + b;
}

class Walker {
 public:
  Walker(std::string root, const Options& o) : root_(std::move(root)), opts_(o) {}

  Status Run(std::vector<SrcEntry>* out) {
    char* real = ::realpath(root_.c_str(), nullptr);
    if (!real) return Status::FromErrno("source " + root_, errno);
    real_root_ = real;
    free(real);
    struct stat st;
    if (::stat(root_.c_str(), &st) != 0) return Status::FromErrno("source " + root_, errno);
    if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("source " + root_ + " is not a directory");
    root_mode_ = st.st_mode & 07777;
    root_mtime_ns_ = MtimeNs(st);
    FS_RETURN_IF_ERROR(Dir("", out));
    DropEscapingLinks(out);
    return Status::OK();
  }
  uint64_t skipped() const { return skipped_; }
  uint32_t root_mode() const { return root_mode_; }
  int64_t root_mtime_ns() const { return root_mtime_ns_; }

 private:
  void Warn(const std::string& msg) {
    skipped_++;
    if (opts_.warn) opts_.warn(msg);
  }

  Status Dir(const std::string& rel, std::vector<SrcEntry>* out) {
    const std::string path = Join(root_, rel);
    DIR* d = ::opendir(path.c_str());
    if (!d) return Status::FromErrno("cannot read directory " + path, errno);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* de = ::readdir(d)) {
      if (std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, "..")) names.emplace_back(de->d_name);
    }
    int err = errno;
    ::closedir(d);
    if (err) return Status::FromErrno("cannot read directory " + path, err);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (opts_.cancel && opts_.cancel->load()) return Status::Aborted("interrupted");
      const std::string crel = Join(rel, name);
      const std::string cpath = Join(root_, crel);
      struct stat st;
      if (::lstat(cpath.c_str(), &st) != 0) {
        if (errno == ENOENT) return Status::IOError(cpath + " vanished while packing");
        return Status::FromErrno("cannot stat " + cpath, errno);
      }
      if (!format::IsSafePath(crel)) {
        Warn("skipping " + cpath + ": name is too long");
        continue;
      }
      SrcEntry e{crel, EntryType::kFile, static_cast<uint32_t>(st.st_mode & 07777),
                 static_cast<uint64_t>(st.st_size), MtimeNs(st), {}};
      if (S_ISREG(st.st_mode)) {
        out->push_back(std::move(e));
      } else if (S_ISDIR(st.st_mode)) {
        e.type = EntryType::kDir;
        e.size = 0;
        out->push_back(std::move(e));
        FS_RETURN_IF_ERROR(Dir(crel, out));
      } else if (S_ISLNK(st.st_mode)) {
        FS_RETURN_IF_ERROR(Link(cpath, std::move(e), out));
      } else {
        const char* kind = S_ISSOCK(st.st_mode) ? "socket" : S_ISFIFO(st.st_mode) ? "FIFO" : "device";
        Warn(std::string("skipping ") + kind + " " + cpath + ": not stored in a dataset");
      }
    }
    return Status::OK();
  }

  // Each symlink was checked on its own (lexically); resolved through the others, a chain such
  // as `x/esc -> up/../..` with `x/up -> .` still leaves the tree. Such links are skipped.
  void DropEscapingLinks(std::vector<SrcEntry>* out) {
    std::unordered_map<std::string_view, size_t> at;
    bool any = false;
    for (size_t i = 0; i < out->size(); i++) {
      at.emplace((*out)[i].rel, i);
      any |= (*out)[i].type == EntryType::kSymlink;
    }
    if (!any) return;
    std::vector<bool> drop(out->size(), false);
    const format::LookupFn lookup = [&](const std::string& p, std::string* target) {
      auto it = at.find(p);
      if (it == at.end() || drop[it->second]) return format::NodeKind::kOther;
      const SrcEntry& e = (*out)[it->second];
      if (e.type == EntryType::kDir) return format::NodeKind::kDir;
      if (e.type != EntryType::kSymlink) return format::NodeKind::kOther;
      *target = e.target;
      return format::NodeKind::kLink;
    };
    for (size_t i = 0; i < out->size(); i++) {
      const SrcEntry& e = (*out)[i];
      if (e.type != EntryType::kSymlink || format::LinkStaysInside(e.rel, e.target, lookup)) continue;
      Warn("skipping symlink " + Join(root_, e.rel) + " -> " + e.target +
           ": points outside the dataset through other symlinks");
      drop[i] = true;
    }
    size_t k = 0;
    for (size_t i = 0; i < out->size(); i++)
      if (!drop[i]) {
        if (k != i) (*out)[k] = std::move((*out)[i]);
        k++;
      }
    out->resize(k);
  }

  Status Link(const std::string& cpath, SrcEntry e, std::vector<SrcEntry>* out) {
    char buf[format::kMaxPath + 1];
    ssize_t n = ::readlink(cpath.c_str(), buf, sizeof buf);
    if (n < 0) return Status::FromErrno("cannot read symlink " + cpath, errno);
    if (n == 0 || static_cast<size_t>(n) > format::kMaxPath) {
      Warn("skipping symlink " + cpath + ": target too long");
      return Status::OK();
    }
    std::string target(buf, n);
    if (target.front() == '/') {
      // An absolute target inside the source tree becomes relative, so it resolves in the mount.
      if (target.compare(0, real_root_.size() + 1, real_root_ + "/") != 0) {
        Warn("skipping symlink " + cpath + " -> " + target + ": points outside the dataset");
        return Status::OK();
      }
      std::string rel_target = target.substr(real_root_.size() + 1);
      std::string up;
      for (char c : e.rel) if (c == '/') up += "../";
      target = up + rel_target;
    }
    if (!format::IsContainedLink(e.rel, target)) {
      Warn("skipping symlink " + cpath + " -> " + target + ": points outside the dataset");
      return Status::OK();
    }
    e.type = EntryType::kSymlink;
    e.mode = 0777;
    e.size = target.size();
    e.target = std::move(target);
    out->push_back(std::move(e));
    return Status::OK();
  }

  std::string root_, real_root_;
  const Options& opts_;
  uint64_t skipped_ = 0;
  uint32_t root_mode_ = 0755;
  int64_t root_mtime_ns_ = 0;
};

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

// Opens a source file found by the scan, checking that it is still the regular file of the size seen.
Result<UniqueFD> OpenSource(const std::string& path, const SrcEntry& e) {
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status::IOError(path + " vanished while packing");
    return Status::FromErrno("cannot read " + path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != e.size)
    return Status::IOError(path + " changed while packing (size " + std::to_string(e.size) + " became " +
                           std::to_string(st.st_size) + ")");
  return fd;
}

Status ReadWhole(const std::string& path, const SrcEntry& e, std::string* out) {
  auto fd = OpenSource(path, e);
  if (!fd.ok()) return fd.status();
  out->resize(e.size);
  return PreadFull(fd->get(), out->data(), e.size, 0, path);
}

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
  Status WriteBig(class ShardOut& shard, const SrcEntry& e, IndexEntry* ie);

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
};

void Packer::Plan() {
  for (uint32_t i = 0; i < entries_.size(); i++)
    if (entries_[i].type == EntryType::kFile) {
      files_.push_back(i);
      raw_total_ += entries_[i].size;
    }
  uint64_t target = std::max<uint64_t>(opts_.shard_size, 1);
  nshards_ = static_cast<uint32_t>(std::max<uint64_t>(1, (raw_total_ + target - 1) / target));
  nshards_ = std::min<uint32_t>(nshards_, std::max<uint32_t>(1, static_cast<uint32_t>(files_.size())));
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
    if (opts_.warn) opts_.warn(std::string("--dict: training failed (") + ZDICT_getErrorName(n) + "); packing without a dictionary");
    return Status::OK();
  }
  dict.resize(n);
  dict_ = std::move(dict);
  // At most level 19: higher levels use windows larger than a reader accepts (kMaxWindowLog).
  cdict_ = ZSTD_createCDict(dict_.data(), dict_.size(), std::min(std::max(opts_.level, 1), 19));
  FS_RETURN_IF_ERROR(WriteFileAtomic(tmp_ + "/" + format::kDictName, dict_, FileMode()));
  manifest_.dict = {format::kDictName, dict_.size(), Xxh3(dict_), ZDICT_getDictID(dict_.data(), dict_.size())};
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
      size_t n = cdict_ ? ZSTD_compress_usingCDict(ctx.c, comp.data(), comp.size(), raw.data(), raw.size(), cdict_)
                        : ZSTD_compressCCtx(ctx.c, comp.data(), comp.size(), raw.data(), raw.size(), opts_.level);
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

class ShardOut {
 public:
  explicit ShardOut(mode_t mode = 0600) : mode_(mode) {}
  Status Open(const std::string& path, uint32_t id, uint64_t dataset_id) {
    path_ = path;
    id_ = id;
    dataset_id_ = dataset_id;
    fd_.Reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_));
    if (!fd_.valid()) return Status::FromErrno("create " + path, errno);
    return Write(format::EncodeHeader({format::kVersion, id, dataset_id}));
  }
  Status Write(std::string_view data) {
    hash_.Update(data.data(), data.size());
    pos_ += data.size();
    return WriteFull(fd_.get(), data.data(), data.size(), path_);
  }
  uint64_t pos() const { return pos_; }
  std::vector<IndexEntry>& entries() { return entries_; }
  // A point to come back to: what has been written since is dropped.
  struct Mark {
    uint64_t pos;
    Xxh3Stream hash;
  };
  Mark GetMark() const { return {pos_, hash_}; }
  Status Rollback(const Mark& m) {
    if (::ftruncate(fd_.get(), static_cast<off_t>(m.pos)) != 0 ||
        ::lseek(fd_.get(), static_cast<off_t>(m.pos), SEEK_SET) < 0)
      return Status::FromErrno("truncate " + path_, errno);
    pos_ = m.pos;
    hash_ = m.hash;
    return Status::OK();
  }
  Status Finish(bool sync, format::ShardRef* ref) {
    std::string raw = format::EncodeIndexRaw(entries_);
    std::string stored(ZSTD_compressBound(raw.size()), '\0');
    size_t n = ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3);
    if (ZSTD_isError(n)) return Status::IOError(std::string("compress index: ") + ZSTD_getErrorName(n));
    stored.resize(n);
    format::Footer f;
    f.index_offset = pos_;
    f.index_stored_len = n;
    f.index_raw_len = raw.size();
    f.index_xxh3 = Xxh3(stored);
    f.entry_count = static_cast<uint32_t>(entries_.size());
    f.shard_id = id_;
    f.dataset_id = dataset_id_;
    FS_RETURN_IF_ERROR(Write(stored));
    FS_RETURN_IF_ERROR(Write(format::EncodeFooter(f)));
    if (sync && ::fdatasync(fd_.get()) != 0) return Status::FromErrno("fsync " + path_, errno);
    fd_.Reset();
    ref->bytes = pos_;
    ref->xxh3 = hash_.Digest();
    return Status::OK();
  }

 private:
  std::string path_;
  mode_t mode_;
  uint32_t id_ = 0;
  uint64_t dataset_id_ = 0;
  UniqueFD fd_;
  uint64_t pos_ = 0;
  Xxh3Stream hash_;
  std::vector<IndexEntry> entries_;
};

std::string ShardName(uint32_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05u.fsd", i);
  return buf;
}

// A file larger than kStreamAbove, read, hashed, compressed and written in 1 MiB pieces (one
// zstd frame, content size set), so its size never shows in memory. Compressed when its first
// 128 KiB compress; if the whole frame then turns out no smaller, it is written again raw.
Status Packer::WriteBig(ShardOut& shard, const SrcEntry& e, IndexEntry* ie) {
  const std::string path = Join(src_, e.rel);
  auto opened = OpenSource(path, e);
  if (!opened.ok()) return opened.status();
  UniqueFD fd = std::move(opened).value();
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  ie->type = EntryType::kFile;
  ie->mode = e.mode;
  ie->size = e.size;
  ie->mtime_ns = e.mtime_ns;
  ie->path = e.rel;
  ie->offset = shard.pos();
  constexpr size_t kPiece = 1u << 20;
  std::unique_ptr<char[]> in(new char[kPiece]);
  auto read_at = [&](uint64_t off, size_t n) {
    Status rs = PreadFull(fd.get(), in.get(), n, off, path);
    return rs.ok() ? rs : Status::IOError(path + " changed while packing: " + rs.message());
  };
  bool compress = false;
  if (opts_.level > 0) {
    // Try a sample first: an incompressible file (media) is not compressed twice.
    const size_t n = static_cast<size_t>(std::min<uint64_t>(e.size, 128u << 10));
    FS_RETURN_IF_ERROR(read_at(0, n));
    thread_local ZstdCtx ctx;
    std::string comp(ZSTD_compressBound(n), '\0');
    size_t c = cdict_ ? ZSTD_compress_usingCDict(ctx.c, comp.data(), comp.size(), in.get(), n, cdict_)
                      : ZSTD_compressCCtx(ctx.c, comp.data(), comp.size(), in.get(), n, opts_.level);
    compress = !ZSTD_isError(c) && c < n;
  }
  if (compress) {
    const ShardOut::Mark mark = shard.GetMark();
    std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    if (!cctx) return Status::IOError("zstd: out of memory");
    ZSTD_CCtx* c = cctx.get();
    if (cdict_) {
      ZSTD_CCtx_refCDict(c, cdict_);
    } else {
      ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, opts_.level);
      // A reader's streaming decoder accepts windows up to 2^kMaxWindowLog (levels up to 19
      // stay within it).
      if (opts_.level > 19) ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, format::kMaxWindowLog);
    }
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setPledgedSrcSize(c, e.size);
    std::unique_ptr<char[]> out(new char[ZSTD_CStreamOutSize()]);
    Xxh3Stream hash;
    Status ws;
    // One call of the compressor; what it produced goes to the shard. Returns what remains to flush.
    auto step = [&](ZSTD_inBuffer* ib, ZSTD_EndDirective mode, size_t* left) {
      ZSTD_outBuffer ob{out.get(), ZSTD_CStreamOutSize(), 0};
      *left = ZSTD_compressStream2(c, &ob, ib, mode);
      if (ZSTD_isError(*left)) return Status::IOError(path + ": zstd: " + ZSTD_getErrorName(*left));
      return ob.pos ? shard.Write(std::string_view(out.get(), ob.pos)) : Status::OK();
    };
    size_t left = 0;
    for (uint64_t off = 0; off < e.size && ws.ok();) {
      if (Cancelled()) return Status::Aborted("interrupted");
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, e.size - off));
      FS_RETURN_IF_ERROR(read_at(off, n));
      hash.Update(in.get(), n);
      ZSTD_inBuffer ib{in.get(), n, 0};
      while (ib.pos < ib.size && ws.ok()) ws = step(&ib, ZSTD_e_continue, &left);
      off += n;
    }
    do {
      ZSTD_inBuffer none{nullptr, 0, 0};
      if (ws.ok()) ws = step(&none, ZSTD_e_end, &left);
    } while (ws.ok() && left != 0);
    FS_RETURN_IF_ERROR(ws);
    if (shard.pos() - ie->offset < e.size) {
      ie->codec = cdict_ ? Codec::kZstdDict : Codec::kZstd;
      ie->stored_len = shard.pos() - ie->offset;
      ie->xxh3 = hash.Digest();
      return Status::OK();
    }
    FS_RETURN_IF_ERROR(shard.Rollback(mark));  // no smaller: stored raw after all
  }
  Xxh3Stream hash;
  for (uint64_t off = 0; off < e.size;) {
    if (Cancelled()) return Status::Aborted("interrupted");
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, e.size - off));
    FS_RETURN_IF_ERROR(read_at(off, n));
    hash.Update(in.get(), n);
    FS_RETURN_IF_ERROR(shard.Write(std::string_view(in.get(), n)));
    off += n;
  }
  ie->codec = Codec::kRaw;
  ie->stored_len = e.size;
  ie->xxh3 = hash.Digest();
  return Status::OK();
}

Status Packer::WriteShards() {
  const size_t threads = opts_.threads ? opts_.threads : ThreadPool::DefaultThreads();
  const size_t window = threads * 3;
  std::vector<std::optional<BatchOut>> slots(batches_.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t consumed = 0;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; t++) {
    workers.emplace_back([&] {
      while (true) {
        size_t i = next++;
        if (i >= batches_.size()) return;
        {
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return stop || i < consumed + window; });
          if (stop) return;
        }
        BatchOut out = Process(batches_[i]);
        std::lock_guard<std::mutex> l(mu);
        slots[i] = std::move(out);
        cv.notify_all();
      }
    });
  }
  auto stop_workers = [&] {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& w : workers) w.join();
  };

  Status st;
  uint64_t done_bytes = 0, done_files = 0;
  ShardOut shard(FileMode());
  uint32_t open_shard = UINT32_MAX;
  for (size_t i = 0; i < batches_.size() && st.ok(); i++) {
    const Batch& b = batches_[i];
    if (b.shard != open_shard) {
      if (open_shard != UINT32_MAX) st = shard.Finish(opts_.sync, &manifest_.shards[open_shard]);
      if (!st.ok()) break;
      shard = ShardOut(FileMode());
      open_shard = b.shard;
      manifest_.shards[open_shard].file = ShardName(open_shard);
      manifest_.shards[open_shard].files = shard_files_[open_shard];
      st = shard.Open(tmp_ + "/" + ShardName(open_shard), open_shard, dataset_id_);
      if (st.ok() && open_shard == 0) {
        // Shard 0 also carries every directory and symlink of the namespace.
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
            ie.offset = shard.pos();
            st = shard.Write(e.target);
            if (!st.ok()) break;
          }
          shard.entries().push_back(std::move(ie));
        }
      }
      if (!st.ok()) break;
    }
    BatchOut out;
    {
      std::unique_lock<std::mutex> l(mu);
      while (!slots[i].has_value()) {
        if (Cancelled()) break;
        cv.wait_for(l, std::chrono::milliseconds(100));
      }
      if (Cancelled()) {
        st = Status::Aborted("interrupted");
        break;
      }
      out = std::move(*slots[i]);
      slots[i].reset();
      consumed = i + 1;
    }
    cv.notify_all();
    if (!out.status.ok()) {
      st = out.status;
      break;
    }
    const uint64_t base = shard.pos();
    if (b.big) {
      IndexEntry ie;
      st = WriteBig(shard, entries_[b.files[0]], &ie);
      if (!st.ok()) break;
      ie.offset -= base;  // relative, like a batch's (made absolute below)
      out.entries.push_back(std::move(ie));
    } else {
      st = shard.Write(out.data);
    }
    for (auto& e : out.entries) {
      e.offset += base;
      done_bytes += e.size;
      manifest_.stored_bytes += e.stored_len;
      shard.entries().push_back(std::move(e));
    }
    done_files += out.entries.size();
    if (opts_.progress) opts_.progress(done_bytes, raw_total_, done_files, files_.size());
  }
  if (st.ok() && open_shard != UINT32_MAX) st = shard.Finish(opts_.sync, &manifest_.shards[open_shard]);
  stop_workers();
  return st;
}

Status Packer::Run(Stats* stats) {
  Walker w(src_, opts_);
  FS_RETURN_IF_ERROR(w.Run(&entries_));
  if (::getrandom(&dataset_id_, sizeof dataset_id_, 0) != sizeof dataset_id_ || dataset_id_ == 0)
    dataset_id_ = static_cast<uint64_t>(::time(nullptr)) ^ (static_cast<uint64_t>(::getpid()) << 32) ^ 1;
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
  manifest_.root_mode = w.root_mode();
  manifest_.root_mtime_ns = w.root_mtime_ns();
  FS_RETURN_IF_ERROR(WriteFileAtomic(tmp_ + "/" + format::kManifestName, format::ManifestToJson(manifest_), FileMode()));
  if (stats) {
    stats->files = manifest_.files;
    stats->dirs = manifest_.dirs;
    stats->symlinks = manifest_.symlinks;
    stats->skipped = w.skipped();
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
  if (::lstat(d.c_str(), &st) == 0) return Status::InvalidArgument(d + " already exists; remove it or choose another name");
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
  if (s.ok() && ::rename(tmp.c_str(), d.c_str()) != 0) s = Status::FromErrno("rename " + tmp + " to " + d, errno);
  if (!s.ok()) {
    Status r = RemoveTree(tmp);
    (void)r;
  }
  return s;
}

}  // namespace fanstore::pack
