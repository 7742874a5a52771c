// Shard reading.
#include "format/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/hash.h"
#include "common/io.h"
#include "common/thread_pool.h"

namespace fanstore::format {
namespace {
std::string Num(uint64_t v) { return std::to_string(v); }
}  // namespace

Dictionary::~Dictionary() { ZSTD_freeDDict(ddict_); }

Status Dictionary::Load(const std::string& dataset_dir, const DictRef& ref) {
  if (ref.file.empty()) return Status::OK();
  const std::string path = dataset_dir + "/" + ref.file;
  if (ref.bytes > kMaxDictBytes)
    return Status::Corruption(path + ": dictionary of " + Num(ref.bytes) +
                              " bytes is larger than the " + Num(kMaxDictBytes) +
                              " a reader accepts");
  auto bytes = ReadSmallFile(path, kMaxDictBytes);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() != ref.bytes || Xxh3(*bytes) != ref.xxh3)
    return Status::Corruption(path + ": dictionary checksum or size mismatch");
  bytes_ = std::move(bytes).value();
  ddict_ = ZSTD_createDDict(bytes_.data(), bytes_.size());
  if (!ddict_) return Status::Corruption(path + ": not a zstd dictionary");
  return Status::OK();
}

FrameDecoder::FrameDecoder(const Dictionary* dict) : dict_(dict), dctx_(ZSTD_createDCtx()) {}
FrameDecoder::~FrameDecoder() { ZSTD_freeDCtx(dctx_); }

Status FrameDecoder::Decode(const IndexEntry& e, std::string_view stored, std::string* scratch,
                            std::string_view* raw) {
  auto fail = [&](const std::string& why) {
    return Status::Corruption("file '" + e.path + "' (frame at offset " + Num(e.offset) +
                              "): " + why);
  };
  if (stored.size() != e.stored_len) return fail("frame length mismatch");
  // The size is the index's claim: larger files are streamed (StreamFrame), never allocated.
  if (e.size > kMaxWholeFrame)
    return fail("file of " + Num(e.size) + " bytes is larger than the " + Num(kMaxWholeFrame) +
                " decoded in memory (stream it)");
  if (e.codec == Codec::kRaw) {
    *raw = stored;
  } else {
    unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
    if (content == ZSTD_CONTENTSIZE_ERROR || content != e.size)
      return fail("not a zstd frame of " + Num(e.size) + " bytes");
    char* out;
    if (scratch) {
      scratch->resize(e.size);
      out = scratch->data();
    } else {
      if (buf_cap_ < e.size) {
        buf_cap_ = std::max<size_t>(e.size, 64u << 10);
        buf_.reset(new char[buf_cap_]);
      }
      out = buf_.get();
    }
    size_t n;
    if (e.codec == Codec::kZstdDict) {
      if (!dict_ || !dict_->ddict())
        return fail("frame needs the dataset's dictionary, which is missing");
      n = ZSTD_decompress_usingDDict(dctx_, out, e.size, stored.data(), stored.size(),
                                     dict_->ddict());
    } else {
      n = ZSTD_decompressDCtx(dctx_, out, e.size, stored.data(), stored.size());
    }
    if (ZSTD_isError(n)) return fail(std::string("zstd: ") + ZSTD_getErrorName(n));
    if (n != e.size) return fail("decompressed to " + Num(n) + " bytes, expected " + Num(e.size));
    *raw = std::string_view(out, n);
  }
  if (Xxh3(raw->data(), raw->size()) != e.xxh3) return fail("content checksum mismatch");
  if (e.type == EntryType::kSymlink && !IsContainedLink(e.path, *raw))
    return fail("symlink target points outside the dataset");
  if (e.type == EntryType::kHardLink && (!IsSafePath(*raw) || *raw == e.path))
    return fail("hard link to '" + std::string(raw->substr(0, 200)) + "', not another path");
  return Status::OK();
}

Status CheckShardSize(const std::string& path, uint64_t size, const ShardRef& ref) {
  if (size == ref.bytes) return Status::OK();
  return Status::Corruption(path + ": size " + Num(size) + " differs from the manifest's " +
                            Num(ref.bytes) + " (truncated?)");
}

Status CheckAgainstManifest(const ShardFile& sh, const ShardRef& ref, uint32_t id) {
  FS_RETURN_IF_ERROR(CheckShardSize(sh.path, sh.size, ref));
  if (sh.header.shard_id != id)
    return Status::Corruption(sh.path + ": holds shard id " + Num(sh.header.shard_id) +
                              " where the manifest expects " + Num(id));
  return Status::OK();
}

Result<std::unique_ptr<ShardFile>> OpenShard(const std::string& path, uint64_t dataset_id,
                                             bool parse) {
  auto s = std::make_unique<ShardFile>();
  s->path = path;
  s->fd.Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!s->fd.valid()) {
    if (errno == ENOENT) return Status::NotFound("missing shard " + path);
    return Status::FromErrno("open " + path, errno);
  }
  struct stat st;
  if (::fstat(s->fd.get(), &st) != 0) return Status::FromErrno("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return Status::Corruption(path + ": not a regular file");
  s->size = static_cast<uint64_t>(st.st_size);
  if (s->size < kHeaderSize + kFooterSize)
    return Status::Corruption(path + ": truncated shard (" + Num(s->size) + " bytes)");
  std::string buf(kHeaderSize, '\0');
  FS_RETURN_IF_ERROR(PreadFull(s->fd.get(), buf.data(), kHeaderSize, 0, path));
  Status st1 = DecodeHeader(buf, &s->header);
  if (!st1.ok()) return st1.Prefixed(path);
  buf.assign(kFooterSize, '\0');
  FS_RETURN_IF_ERROR(PreadFull(s->fd.get(), buf.data(), kFooterSize, s->size - kFooterSize, path));
  st1 = DecodeFooter(buf, s->size, &s->footer);
  if (!st1.ok()) return st1.Prefixed(path);
  if (s->footer.shard_id != s->header.shard_id || s->footer.dataset_id != s->header.dataset_id)
    return Status::Corruption(path + ": header and footer disagree (shard id or dataset id)");
  if (dataset_id != 0 && s->header.dataset_id != dataset_id)
    return Status::Corruption(path + ": shard belongs to another dataset");
  FS_RETURN_IF_ERROR(ReadIndex(s.get(), parse));
  return s;
}

namespace {
Status ReadStoredIndex(const ShardFile& s, std::string* stored) {
  stored->assign(s.footer.index_stored_len, '\0');
  return PreadFull(s.fd.get(), stored->data(), stored->size(), s.footer.index_offset, s.path);
}
Result<std::vector<IndexEntry>> DecodeIndexOf(const ShardFile& s, std::string_view stored) {
  auto entries = DecodeIndex(stored, s.footer);
  if (!entries.ok()) return entries.status().Prefixed(s.path);
  return entries;
}
}  // namespace

Status ReadIndex(ShardFile* s, bool parse) {
  FS_RETURN_IF_ERROR(ReadStoredIndex(*s, &s->index_stored));
  if (!parse) return Status::OK();
  auto entries = DecodeIndexOf(*s, s->index_stored);
  if (!entries.ok()) return entries.status();
  s->entries = std::move(entries).value();
  return Status::OK();
}

Result<std::vector<IndexEntry>> ReadEntries(const ShardFile& s) {
  std::string stored;
  FS_RETURN_IF_ERROR(ReadStoredIndex(s, &stored));
  return DecodeIndexOf(s, stored);
}

FrameDecoder* DecoderPool::Get() {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = per_thread_[std::this_thread::get_id()];
  if (!slot) slot = std::make_unique<FrameDecoder>(dict_);
  return slot.get();
}

Status ReadFrame(int fd, const std::string& path, const IndexEntry& e, FrameDecoder* dec,
                 std::string* out) {
  if (e.stored_len > kMaxWholeFrame || e.size > kMaxWholeFrame)
    return Status::Corruption(path + ": file '" + e.path + "' (frame at offset " + Num(e.offset) +
                              "): " + Num(std::max(e.size, e.stored_len)) +
                              " bytes is too large to read in memory");
  std::string stored(e.stored_len, '\0');
  FS_RETURN_IF_ERROR(PreadFull(fd, stored.data(), stored.size(), e.offset, path));
  std::string scratch;
  std::string_view raw;
  Status s = dec->Decode(e, stored, &scratch, &raw);
  if (!s.ok()) return s.Prefixed(path);
  if (e.codec == Codec::kRaw)
    *out = std::move(stored);
  else
    *out = std::move(scratch);
  return Status::OK();
}

Status StreamFrame(int fd, const std::string& path, const IndexEntry& e, const Dictionary* dict,
                   const Sink& sink,
                   const std::function<void(uint64_t, std::string_view)>& on_stored) {
  auto fail = [&](const std::string& why) {
    return Status::Corruption(path + ": file '" + e.path + "' (frame at offset " + Num(e.offset) +
                              "): " + why);
  };
  constexpr size_t kPiece = 1u << 20;
  std::vector<char> in(std::min<uint64_t>(e.stored_len, kPiece));
  Xxh3Stream hash;
  uint64_t produced = 0;
  auto emit = [&](const char* p, size_t n) {
    hash.Update(p, n);
    produced += n;
    return sink(std::string_view(p, n));
  };
  if (e.codec == Codec::kRaw) {
    if (e.stored_len != e.size)
      return fail("raw frame of " + Num(e.stored_len) + " bytes for a file of " + Num(e.size));
    for (uint64_t off = 0; off < e.stored_len;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), e.stored_len - off));
      FS_RETURN_IF_ERROR(PreadFull(fd, in.data(), n, e.offset + off, path));
      if (on_stored) on_stored(e.offset + off, std::string_view(in.data(), n));
      FS_RETURN_IF_ERROR(emit(in.data(), n));
      off += n;
    }
  } else {
    if (e.codec == Codec::kZstdDict && (!dict || !dict->ddict()))
      return fail("frame needs the dataset's dictionary, which is missing");
    std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
    if (!dctx) return Status::IOError("zstd: out of memory");
    if (e.codec == Codec::kZstdDict) ZSTD_DCtx_refDDict(dctx.get(), dict->ddict());
    // The window is what a streaming decoder allocates: a frame may not ask for more.
    ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, kMaxWindowLog);
    std::vector<char> out(std::min<uint64_t>(std::max<uint64_t>(e.size, 1), kPiece));
    size_t last = 1;  // ZSTD_decompressStream's hint: 0 once the frame is complete
    // One call of the decoder on `ib`; what it produced goes to the sink.
    auto step = [&](ZSTD_inBuffer* ib) {
      ZSTD_outBuffer ob{out.data(), out.size(), 0};
      last = ZSTD_decompressStream(dctx.get(), &ob, ib);
      if (ZSTD_isError(last)) return fail(std::string("zstd: ") + ZSTD_getErrorName(last));
      if (produced + ob.pos > e.size)
        return fail("decompresses to more than " + Num(e.size) + " bytes");
      return ob.pos ? emit(out.data(), ob.pos) : Status::OK();
    };
    for (uint64_t off = 0; off < e.stored_len;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), e.stored_len - off));
      FS_RETURN_IF_ERROR(PreadFull(fd, in.data(), n, e.offset + off, path));
      if (on_stored) on_stored(e.offset + off, std::string_view(in.data(), n));
      off += n;
      ZSTD_inBuffer ib{in.data(), n, 0};
      while (ib.pos < ib.size) {
        FS_RETURN_IF_ERROR(step(&ib));
        if (last == 0 && ib.pos < ib.size) return fail("bytes after the end of the zstd frame");
      }
    }
    // Output the decoder still holds.
    while (last != 0) {
      const uint64_t before = produced;
      ZSTD_inBuffer none{nullptr, 0, 0};
      FS_RETURN_IF_ERROR(step(&none));
      if (produced == before) break;  // no progress: the frame is truncated
    }
    if (last != 0) return fail("truncated zstd frame");
  }
  if (produced != e.size)
    return fail("decompressed to " + Num(produced) + " bytes, expected " + Num(e.size));
  if (hash.Digest() != e.xxh3) return fail("content checksum mismatch");
  return Status::OK();
}

namespace {

// Read buffers are recycled: a fresh multi-megabyte allocation per chunk costs page faults and
// zero-filling, which made a scan several times slower than `cat`.
struct Chunk {
  std::unique_ptr<char[]> data;
  size_t cap = 0;
};

// Read buffers, kept for the life of the process: a fresh buffer costs a page fault per 4 KiB
// on first touch (about 10% of a stage-in's time, measured), so every scan reuses the buffers
// of the scans before it. At most kKeep idle buffers are kept.
class ChunkPool {
 public:
  static ChunkPool& Shared() {
    static ChunkPool* pool = new ChunkPool();  // never destroyed: scans may run during exit
    return *pool;
  }
  // A buffer of at least `size` bytes (at least min_cap, so that it is reused, not regrown).
  std::shared_ptr<Chunk> Get(size_t size, size_t min_cap) {
    std::unique_ptr<Chunk> c;
    {
      std::lock_guard<std::mutex> l(mu_);
      // The smallest idle buffer that is large enough.
      size_t best = free_.size();
      for (size_t i = 0; i < free_.size(); i++)
        if (free_[i]->cap >= size && (best == free_.size() || free_[i]->cap < free_[best]->cap))
          best = i;
      if (best == free_.size() && !free_.empty()) best = free_.size() - 1;  // regrow one
      if (best < free_.size()) {
        c = std::move(free_[best]);
        free_[best] = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!c) c = std::make_unique<Chunk>();
    if (c->cap < size) {
      size_t cap = std::max(size, min_cap);
      c->data.reset(new char[cap]);
      c->cap = cap;
    }
    return std::shared_ptr<Chunk>(c.release(), [this](Chunk* p) { Put(p); });
  }

 private:
  static constexpr size_t kKeep = 48;
  void Put(Chunk* c) {
    std::unique_ptr<Chunk> owned(c);
    std::lock_guard<std::mutex> l(mu_);
    if (free_.size() < kKeep) free_.push_back(std::move(owned));
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<Chunk>> free_;
};

}  // namespace

namespace {

// One pass over a shard in file order: chunks of small frames go to the pool, large frames are
// streamed on this thread, and the whole-shard hash is fed in order on a thread of its own.
class Scanner {
 public:
  Scanner(const ShardFile& shard, const ScanOptions& opts, const FrameFn& fn)
      : shard_(shard),
        opts_(opts),
        fn_(fn),
        // At most a few chunks in flight: bounds memory while decoding overlaps reading.
        group_(opts.pool, opts.pool ? opts.pool->size() * 2 + 2 : 1),
        hasher_thread_(opts.pool && opts.check_file_hash ? std::make_unique<ThreadPool>(1)
                                                         : nullptr),
        hasher_(hasher_thread_.get(), 8) {
    const std::vector<IndexEntry>& entries = opts.entries ? *opts.entries : shard.entries;
    order_.reserve(entries.size());
    for (const auto& e : entries)
      if (e.type != EntryType::kDir) order_.push_back(&e);
    // Empty frames first at a shared offset, so that none sorts after a large frame it precedes.
    std::sort(order_.begin(), order_.end(), [](auto* a, auto* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->stored_len < b->stored_len;
    });
  }

  Status Run() {
    ::posix_fadvise(shard_.fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    while (pos_ < shard_.size && !Failed()) {
      const bool ok = next_ < order_.size() && Big(order_[next_]) && order_[next_]->offset <= pos_
                          ? StreamBig()
                          : ReadChunk();
      if (!ok) break;
    }
    buf_.reset();
    hasher_.Wait();
    group_.Wait();
    if (!first_.ok()) return first_;
    if (next_ != order_.size())
      return Status::Corruption(shard_.path + ": frames run past the end of the file");
    if (opts_.check_file_hash && file_hash_.Digest() != opts_.expect_file_xxh3)
      return Status::Corruption(shard_.path + ": whole-shard checksum differs from the manifest");
    return Status::OK();
  }

 private:
  // Large files are streamed on this thread, the rest decoded from the chunks on the pool.
  bool Big(const IndexEntry* e) const {
    return opts_.stream && (e->size > kStreamAbove || e->stored_len > kStreamAbove);
  }
  void Record(const Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (first_.ok() && !s.ok()) first_ = s.Prefixed(shard_.path);
  }
  bool Failed() {
    std::lock_guard<std::mutex> l(mu_);
    return !first_.ok();
  }

  // A large frame: read, hashed and decoded piece by piece, never held whole.
  bool StreamBig() {
    const IndexEntry& e = *order_[next_++];
    hasher_.Wait();          // the whole-shard hash is fed here, in order, from now on
    uint64_t hashed = pos_;  // bytes before this are in the whole-shard hash already
    auto on_stored = [&](uint64_t off, std::string_view piece) {
      const uint64_t end = off + piece.size();
      if (end <= hashed) return;
      const size_t skip = static_cast<size_t>(hashed > off ? hashed - off : 0);
      if (opts_.check_file_hash) file_hash_.Update(piece.data() + skip, piece.size() - skip);
      if (opts_.on_read) opts_.on_read(piece.size() - skip);
      hashed = end;
    };
    bool decoded = false;
    auto decode = [&](const Sink& sink) {
      decoded = true;
      return StreamFrame(shard_.fd.get(), shard_.path, e, opts_.dict, sink, on_stored);
    };
    Status st = opts_.stream(e, decode);
    if (st.ok() && !decoded) st = decode([](std::string_view) { return Status::OK(); });
    if (!st.ok()) {
      // StreamFrame's errors already name the shard.
      std::lock_guard<std::mutex> l(mu_);
      if (first_.ok())
        first_ = st.message().compare(0, shard_.path.size(), shard_.path) == 0
                     ? st
                     : st.Prefixed(shard_.path);
      return false;
    }
    buf_.reset();
    pos_ = std::max(pos_, e.offset + e.stored_len);
    buf_start_ = pos_;
    // A writer never overlaps frames; the chunks after this one carry nothing from before.
    if (next_ < order_.size() && !Big(order_[next_]) && order_[next_]->stored_len > 0 &&
        order_[next_]->offset < pos_) {
      Record(Status::Corruption("frame at offset " + std::to_string(order_[next_]->offset) +
                                " of '" + order_[next_]->path + "' overlaps the frame of '" +
                                e.path + "'"));
      return false;
    }
    return true;
  }

  // How much to read at pos_: up to the last frame that fits in a chunk, or the next frame whole
  // when it alone is larger, so that the next read starts at a frame with nothing to carry. A
  // large frame is never read into a chunk: the read stops where it starts.
  uint64_t NextReadSize() const {
    uint64_t want = opts_.chunk_bytes;
    if (next_ < order_.size() && Big(order_[next_])) {
      want = std::min<uint64_t>(want, order_[next_]->offset - pos_);
    } else if (next_ < order_.size()) {
      uint64_t end = order_[next_]->offset + order_[next_]->stored_len;
      for (size_t k = next_ + 1; k < order_.size(); k++) {
        if (Big(order_[k])) break;
        uint64_t e = order_[k]->offset + order_[k]->stored_len;
        if (e > pos_ + opts_.chunk_bytes || e < end) break;
        end = e;
      }
      if (end > pos_) want = end - pos_;
    }
    return std::min<uint64_t>(want, shard_.size - pos_);
  }

  bool ReadChunk() {
    // Carry the unfinished tail (from the next frame's start) into a fresh buffer.
    uint64_t keep_from = next_ < order_.size() && !Big(order_[next_])
                             ? std::max(order_[next_]->offset, buf_start_)
                             : pos_;
    if (keep_from > pos_) keep_from = pos_;
    const uint64_t want = NextReadSize();
    auto nb = ChunkPool::Shared().Get(pos_ - keep_from + want, 2 * opts_.chunk_bytes);
    if (buf_ && pos_ > keep_from)
      std::memcpy(nb->data.get(), buf_->data.get() + (keep_from - buf_start_), pos_ - keep_from);
    char* dst = nb->data.get() + (pos_ - keep_from);
    Status rs = PreadFull(shard_.fd.get(), dst, want, pos_, shard_.path);
    if (!rs.ok()) {
      Record(rs);
      return false;
    }
    if (opts_.check_file_hash)
      hasher_.Add([this, dst, want, hold = nb] { file_hash_.Update(dst, want); });
    if (opts_.on_read) opts_.on_read(want);
    buf_ = std::move(nb);
    buf_start_ = keep_from;
    pos_ += want;
    DispatchComplete();
    return true;
  }

  // Every frame the chunk completes goes to the pool as one task: a task per small file would
  // cost more in hand-offs than the work itself.
  void DispatchComplete() {
    std::vector<const IndexEntry*> batch;
    while (next_ < order_.size() && !Big(order_[next_]) &&
           order_[next_]->offset + order_[next_]->stored_len <= pos_)
      batch.push_back(order_[next_++]);
    if (batch.empty()) return;
    group_.Add([this, batch = std::move(batch), base = buf_start_, hold = buf_] {
      for (const IndexEntry* e : batch) {
        // An empty frame may sit anywhere; it has no bytes in the chunk.
        std::string_view stored =
            e->stored_len == 0
                ? std::string_view()
                : std::string_view(hold->data.get() + (e->offset - base), e->stored_len);
        Status st = fn_(*e, stored);
        if (!st.ok()) {
          Record(st);
          return;
        }
      }
    });
  }

  const ShardFile& shard_;
  const ScanOptions& opts_;
  const FrameFn& fn_;
  std::vector<const IndexEntry*> order_;  // frames in file order
  std::mutex mu_;
  Status first_;  // the first error, from any thread
  Xxh3Stream file_hash_;
  TaskGroup group_;
  std::unique_ptr<ThreadPool> hasher_thread_;
  TaskGroup hasher_;
  std::shared_ptr<Chunk> buf_;
  uint64_t buf_start_ = 0, pos_ = 0;  // buf_ holds [buf_start_, pos_)
  size_t next_ = 0;                   // the first frame not yet handed out
};

}  // namespace

Status ScanShard(const ShardFile& shard, const ScanOptions& opts, const FrameFn& fn) {
  return Scanner(shard, opts, fn).Run();
}

Status ScanShards(const Manifest& m, const std::vector<const ShardFile*>& shards, ThreadPool* pool,
                  const std::function<void(uint64_t)>& on_read, const std::atomic<bool>* cancel,
                  const FrameFn& fn, const StreamFn& stream, const Dictionary* dict) {
  return ForEachShard(
      m, shards, pool, on_read, cancel,
      [&](size_t i, const ScanOptions& so) { return ScanShard(*shards[i], so, fn); }, stream, dict);
}

Status ForEachShard(const Manifest& m, const std::vector<const ShardFile*>& shards,
                    ThreadPool* pool, const std::function<void(uint64_t)>& on_read,
                    const std::atomic<bool>* cancel, const ShardScanFn& scan,
                    const StreamFn& stream, const Dictionary* dict) {
  const size_t n = shards.size(), threads = pool ? pool->size() : 1;
  auto options = [&](size_t i, ThreadPool* p) {
    ScanOptions so;
    so.pool = p;
    if (!p) so.chunk_bytes = 256u << 10;
    so.check_file_hash = true;
    so.expect_file_xxh3 = m.shards[shards[i]->header.shard_id].xxh3;  // ids checked at open
    so.on_read = on_read;
    so.stream = stream;
    so.dict = dict;
    return so;
  };
  auto cancelled = [&] { return cancel && cancel->load(); };
  if (n < threads || threads == 1) {
    for (size_t i = 0; i < n; i++) {
      if (cancelled()) return Status::Aborted("cancelled");
      FS_RETURN_IF_ERROR(scan(i, options(i, pool)));
    }
    return Status::OK();
  }
  std::vector<Status> results(n);
  std::atomic<size_t> first_bad{n};
  ParallelFor(n, threads, [&](size_t i) {
    if (i > first_bad.load()) return;  // a lower shard already failed: that is the answer
    results[i] = cancelled() ? Status::Aborted("cancelled") : scan(i, options(i, nullptr));
    if (results[i].ok()) return;
    size_t cur = first_bad.load();
    while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
    }
  });
  return first_bad.load() < n ? results[first_bad.load()] : Status::OK();
}

}  // namespace fanstore::format
