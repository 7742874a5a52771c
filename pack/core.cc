// The packers' shared parts (see core.h).
#include "pack/core.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>

#include "common/hash.h"
#include "common/io.h"

namespace fanstore::pack {
namespace {

using format::Codec;
using format::EntryType;
using format::IndexEntry;

struct ZstdCtx {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ~ZstdCtx() { ZSTD_freeCCtx(c); }
};

// Whether a file is not worth a try of zstd: up to 1 KiB from its middle has above 7.6 bits of
// entropy per byte (Miller-Madow estimate, which corrects a short sample's bias), as
// compressed media (JPEG, PNG, video) and random bytes do (they measure 7.9-8); text measures
// 4-5, numeric arrays 5-7.5. zstd codes literals with Huffman tables, so it cannot beat that
// entropy by more than what its matches win, which such data does not offer; trying costs
// 2-5 µs per small file, the estimate a tenth of that.
bool LooksIncompressible(std::string_view raw) {
  constexpr size_t kSample = 1024;
  if (raw.size() < 256) return false;
  static const std::array<float, kSample + 1> nlogn = [] {
    std::array<float, kSample + 1> t{};
    for (size_t n = 1; n <= kSample; n++) t[n] = static_cast<float>(n * std::log2(double(n)));
    return t;
  }();
  const size_t n = std::min(raw.size(), kSample);
  uint16_t count[256] = {};
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data()) + (raw.size() - n) / 2;
  for (size_t i = 0; i < n; i++) count[p[i]]++;
  float sum = 0;
  int used = 0;
  for (uint16_t c : count) {
    sum += nlogn[c];
    used += c != 0;
  }
  const float bits = std::log2(static_cast<float>(n)) - sum / static_cast<float>(n) +
                     static_cast<float>(used - 1) / (2.0f * static_cast<float>(n) * 0.6931472f);
  return bits > 7.6f;
}

IndexEntry EntryFor(const SrcEntry& e) {
  IndexEntry ie;
  ie.type = e.type;
  ie.mode = e.mode;
  ie.size = e.size;
  ie.mtime_ns = e.mtime_ns;
  ie.ctime_ns = e.ctime_ns != 0 ? e.ctime_ns : e.mtime_ns;  // 0: the source gave none
  ie.path = e.rel;
  ie.xattrs = format::XattrList(e.xattrs);
  return ie;
}

}  // namespace

Status BigSource::ReadAt(uint64_t off, size_t n) {
  Status rs = PreadFull(fd.get(), in.get(), n, off, path);
  return rs.ok() ? rs : Status::IOError(path + " changed while packing: " + rs.message());
}

uint64_t RandomNonZero() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v || v == 0)
    v = static_cast<uint64_t>(::time(nullptr)) ^ (static_cast<uint64_t>(::getpid()) << 32) ^ 1;
  return v;
}

PackCore::PackCore(std::string tmp, const Options& o, mode_t dir_mode)
    : opts_(o), tmp_(std::move(tmp)), dir_mode_(dir_mode) {}

PackCore::~PackCore() { ZSTD_freeCDict(cdict_); }

void PackCore::CompressFile(const SrcEntry& e, std::string_view raw, std::string* comp,
                            BatchOut* out) const {
  thread_local ZstdCtx ctx;
  IndexEntry ie = EntryFor(e);
  ie.xxh3 = Xxh3(raw.data(), raw.size());
  ie.offset = out->data.size();
  ie.codec = Codec::kRaw;
  if (opts_.level > 0 && raw.size() >= 64 && !LooksIncompressible(raw)) {
    comp->resize(ZSTD_compressBound(raw.size()));
    size_t n = cdict_ ? ZSTD_compress_usingCDict(ctx.c, comp->data(), comp->size(), raw.data(),
                                                 raw.size(), cdict_)
                      : ZSTD_compressCCtx(ctx.c, comp->data(), comp->size(), raw.data(), raw.size(),
                                          opts_.level);
    if (!ZSTD_isError(n) && n < raw.size()) {
      ie.codec = cdict_ ? Codec::kZstdDict : Codec::kZstd;
      out->data.append(comp->data(), n);
    }
  }
  if (ie.codec == Codec::kRaw) out->data.append(raw);
  ie.stored_len = out->data.size() - ie.offset;
  out->entries.push_back(std::move(ie));
}

// Whether the file's first 128 KiB compress: an incompressible file (media) is not compressed
// twice.
bool PackCore::SampleCompresses(BigSource& src, uint64_t size) {
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
Status PackCore::WriteBigZstd(ShardOut& shard, BigSource& src, const SrcEntry& e, IndexEntry* ie,
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

// Compressed when its first 128 KiB compress; if the whole frame then turns out no smaller, the
// file is written again raw.
Status PackCore::WriteBig(ShardOut& shard, BigSource& src, const SrcEntry& e, IndexEntry* ie) {
  ::posix_fadvise(src.fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  *ie = EntryFor(e);
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

Status PackCore::OpenShard(ShardOut* shard, uint32_t id) {
  if (manifest_.shards.size() <= id) manifest_.shards.resize(id + 1);
  manifest_.shards[id].file = ShardName(id);
  *shard = ShardOut(FileMode(), /*writeback=*/opts_.sync);
  return shard->Open(tmp_ + "/" + ShardName(id), id, dataset_id_);
}

Status PackCore::AppendNonFiles(ShardOut& shard, const std::vector<SrcEntry>& entries) {
  for (const auto& e : entries) {
    if (e.type == EntryType::kFile) continue;
    IndexEntry ie = EntryFor(e);
    if (e.type == EntryType::kSymlink || e.type == EntryType::kHardLink) {
      ie.size = ie.stored_len = e.target.size();
      ie.xxh3 = Xxh3(e.target);
      ie.offset = shard.pos();
      FS_RETURN_IF_ERROR(shard.Write(e.target));
    }  // a directory keeps the size its source gave it, and has no frame
    shard.entries().push_back(std::move(ie));
  }
  return Status::OK();
}

Status PackCore::AppendBatch(ShardOut& shard, BatchOut out) {
  const uint64_t base = shard.pos();
  FS_RETURN_IF_ERROR(shard.Write(out.data));
  for (auto& e : out.entries) {
    e.offset += base;
    Count(shard, std::move(e));
  }
  Progress();
  return Status::OK();
}

Status PackCore::AppendBig(ShardOut& shard, BigSource& src, const SrcEntry& e) {
  IndexEntry ie;
  FS_RETURN_IF_ERROR(WriteBig(shard, src, e, &ie));
  Count(shard, std::move(ie));
  Progress();
  return Status::OK();
}

void PackCore::Count(ShardOut& shard, IndexEntry e) {
  done_bytes_ += e.size;
  done_files_++;
  manifest_.stored_bytes += e.stored_len;
  shard.entries().push_back(std::move(e));
}

void PackCore::Progress() {
  if (opts_.progress) opts_.progress(done_bytes_, raw_total_, done_files_, files_total_);
}

Status PackCore::FinishShard(ShardOut& shard, uint32_t id) {
  uint64_t files = 0;
  for (const auto& e : shard.entries()) files += e.type == EntryType::kFile;
  manifest_.shards[id].files = files;
  return shard.Finish(opts_.sync, &manifest_.shards[id]);
}

Status PackCore::WriteManifest(const SourceTree& meta, uint64_t nfiles, uint64_t dirs,
                               uint64_t symlinks, Stats* stats) {
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
  manifest_.files = nfiles;
  manifest_.dirs = dirs;
  manifest_.symlinks = symlinks;
  manifest_.raw_bytes = done_bytes_;
  manifest_.root_mode = meta.root_mode;
  manifest_.root_mtime_ns = meta.root_mtime_ns;
  manifest_.root_ctime_ns = meta.root_ctime_ns;
  manifest_.root_size = meta.root_size;
  manifest_.root_xattrs = meta.root_xattrs;
  FS_RETURN_IF_ERROR(WriteFileAtomic(tmp_ + "/" + format::kManifestName,
                                     format::ManifestToJson(manifest_), FileMode()));
  if (stats) {
    stats->files = nfiles;
    stats->dirs = dirs;
    stats->symlinks = symlinks;
    stats->skipped = meta.skipped;
    stats->shards = manifest_.shards.size();
    stats->raw_bytes = done_bytes_;
    stats->stored_bytes = manifest_.stored_bytes;
    stats->dict_used = cdict_ != nullptr;
  }
  return Status::OK();
}

}  // namespace fanstore::pack
