// Header, footer and index codecs, with the validation every reader relies on.
#include "format/format.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/hash.h"
#include "common/le.h"
#include "common/path.h"
#include "common/xattrs.h"

namespace fanstore::format {
namespace {

using le::Get32;
using le::Get64;
using le::Put32;
using le::Put64;

std::string Num(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string EncodeHeader(const Header& h) {
  std::string s(kShardMagic, sizeof kShardMagic);
  Put32(s, h.version);
  Put32(s, h.shard_id);
  Put64(s, h.dataset_id);
  s.resize(kHeaderSize, '\0');
  return s;
}

Status DecodeHeader(std::string_view b, Header* h) {
  if (b.size() < kHeaderSize) return Status::Corruption("truncated header");
  if (std::memcmp(b.data(), kShardMagic, sizeof kShardMagic) != 0)
    return Status::Corruption("bad magic at offset 0 (not a FanStore shard)");
  h->version = Get32(b.data() + 8);
  if (!KnownVersion(h->version))
    return Status::Corruption("unsupported shard version " + Num(h->version) +
                              " (this tool reads " + Num(kMinVersion) + " to " + Num(kVersion) +
                              ")");
  h->shard_id = Get32(b.data() + 12);
  h->dataset_id = Get64(b.data() + 16);
  return Status::OK();
}

std::string EncodeFooter(const Footer& f) {
  std::string s;
  Put64(s, f.index_offset);
  Put64(s, f.index_stored_len);
  Put64(s, f.index_raw_len);
  Put64(s, f.index_xxh3);
  Put32(s, f.entry_count);
  Put32(s, f.version);
  Put32(s, f.shard_id);
  Put32(s, 0);
  Put64(s, f.dataset_id);
  s.append(kFooterMagic, sizeof kFooterMagic);
  return s;
}

Status DecodeFooter(std::string_view b, uint64_t file_size, Footer* f) {
  if (file_size < kHeaderSize + kFooterSize || b.size() < kFooterSize)
    return Status::Corruption("truncated shard: " + Num(file_size) +
                              " bytes is shorter than header and footer");
  const char* p = b.data();
  const uint64_t footer_off = file_size - kFooterSize;
  if (std::memcmp(p + 56, kFooterMagic, sizeof kFooterMagic) != 0)
    return Status::Corruption("bad footer magic at offset " + Num(footer_off) +
                              " (truncated or not a shard)");
  f->index_offset = Get64(p);
  f->index_stored_len = Get64(p + 8);
  f->index_raw_len = Get64(p + 16);
  f->index_xxh3 = Get64(p + 24);
  f->entry_count = Get32(p + 32);
  f->version = Get32(p + 36);
  f->shard_id = Get32(p + 40);
  f->dataset_id = Get64(p + 48);
  if (!KnownVersion(f->version))
    return Status::Corruption("unsupported shard version " + Num(f->version) + " in footer");
  if (f->index_offset < kHeaderSize || f->index_offset > footer_off ||
      f->index_stored_len != footer_off - f->index_offset)
    return Status::Corruption("index at offset " + Num(f->index_offset) + " length " +
                              Num(f->index_stored_len) + " does not fit a file of " +
                              Num(file_size) + " bytes");
  if (f->index_raw_len > kMaxIndexRaw)
    return Status::Corruption("absurd index size " + Num(f->index_raw_len));
  const uint64_t fixed = EntryFixedSize(f->version);
  const uint64_t most = fixed + kMaxPath + (f->version >= 3 ? xattrs::kMaxEncoded : 0);
  if (uint64_t{f->entry_count} * fixed > f->index_raw_len ||
      f->index_raw_len > uint64_t{f->entry_count} * most)
    return Status::Corruption("absurd entry count " + Num(f->entry_count) + " for an index of " +
                              Num(f->index_raw_len) + " bytes");
  if (f->entry_count > kMaxEntries)
    return Status::Corruption("absurd entry count " + Num(f->entry_count) + " (at most " +
                              Num(kMaxEntries) + " per shard)");
  // A zstd frame is never much larger than its content: a longer index is not one.
  if (f->index_stored_len > ZSTD_COMPRESSBOUND(f->index_raw_len) + 64)
    return Status::Corruption("index of " + Num(f->index_stored_len) +
                              " stored bytes is too long for " + Num(f->index_raw_len) +
                              " bytes of entries");
  return Status::OK();
}

std::string EncodeIndexRaw(const std::vector<IndexEntry>& entries, uint32_t version) {
  std::string s;
  for (const auto& e : entries) {
    s.push_back(static_cast<char>(e.type));
    s.push_back(static_cast<char>(e.codec));
    s.push_back(static_cast<char>(e.path.size() & 0xff));
    s.push_back(static_cast<char>(e.path.size() >> 8));
    Put32(s, e.mode);
    Put64(s, e.size);
    Put64(s, static_cast<uint64_t>(e.mtime_ns));
    Put64(s, e.offset);
    Put64(s, e.stored_len);
    Put64(s, e.xxh3);
    if (version >= 3) {
      Put64(s, static_cast<uint64_t>(e.ctime_ns));
      Put32(s, static_cast<uint32_t>(e.Xattrs().size()));
    }
    s.append(e.path);
    if (version >= 3) s.append(e.Xattrs());
  }
  return s;
}

bool IsSafePath(std::string_view p) { return p.size() <= kMaxPath && IsCanonicalPath(p, kMaxName); }

bool IsContainedLink(std::string_view link_path, std::string_view target) {
  if (target.empty() || target.front() == '/' || target.size() > kMaxPath ||
      target.find('\0') != std::string_view::npos)
    return false;
  // Depth of the link's directory, then walk the target's components.
  long depth = 0;
  for (char c : link_path) depth += c == '/';
  size_t start = 0;
  while (start <= target.size()) {
    size_t end = target.find('/', start);
    if (end == std::string_view::npos) end = target.size();
    std::string_view c = target.substr(start, end - start);
    if (c == "..") {
      if (--depth < 0) return false;
    } else if (!c.empty() && c != ".") {
      depth++;
    }
    start = end + 1;
  }
  return true;
}

IndexParser::IndexParser(uint64_t data_end, uint32_t expected_count, uint32_t version,
                         IndexEntryFn sink)
    : data_end_(data_end),
      expected_(expected_count),
      version_(version),
      fixed_(EntryFixedSize(version)),
      sink_(std::move(sink)) {
  // The count is the footer's claim: reserve only what a real index of that size would hold,
  // never what a hostile count asks for.
  if (!sink_) out_.reserve(std::min<uint32_t>(expected_count, 1u << 16));
}

size_t IndexParser::PathLen(const char* p) {
  return static_cast<uint8_t>(p[2]) | (size_t{static_cast<uint8_t>(p[3])} << 8);
}

// Capped at kMaxEncoded + 1, which xattrs::Valid refuses: nothing is buffered for more.
size_t IndexParser::XattrLen(const char* p) const {
  return version_ >= 3 ? std::min<size_t>(Get32(p + 56), xattrs::kMaxEncoded + 1) : 0;
}

size_t IndexParser::EntryLen(const char* p) const { return fixed_ + PathLen(p) + XattrLen(p); }

Status IndexParser::ParseOne(const char* p) {
  const size_t path_len = PathLen(p);
  const uint32_t i = count_;
  // Error context, built only on the error path (this runs once per file at start-up).
  auto at = [&] { return "index entry " + Num(i) + " (index byte " + Num(consumed_) + ")"; };
  IndexEntry& e = cur_;
  e.xattrs = XattrList();
  uint8_t type = static_cast<uint8_t>(p[0]);
  uint8_t codec = static_cast<uint8_t>(p[1]);
  e.mode = Get32(p + 4);
  e.size = Get64(p + 8);
  e.mtime_ns = static_cast<int64_t>(Get64(p + 16));
  e.offset = Get64(p + 24);
  e.stored_len = Get64(p + 32);
  e.xxh3 = Get64(p + 40);
  e.ctime_ns = version_ >= 3 ? static_cast<int64_t>(Get64(p + 48)) : e.mtime_ns;
  e.path.assign(p + fixed_, path_len);
  if (!IsSafePath(e.path))
    return Status::Corruption(at() + ": unsafe path '" + e.path.substr(0, 200) + "'");
  auto where = [&] { return at() + " '" + e.path + "'"; };
  if (const size_t xattr_len = XattrLen(p); xattr_len != 0) {
    const std::string_view enc(p + fixed_ + path_len, xattr_len);
    std::string why;
    if (!xattrs::Valid(enc, &why)) return Status::Corruption(where() + ": " + why);
    if (type != static_cast<uint8_t>(EntryType::kFile) &&
        type != static_cast<uint8_t>(EntryType::kDir))
      return Status::Corruption(where() + ": extended attributes on a link");
    e.xattrs = XattrList(enc);
  }
  if (type < 1 || type > 4) return Status::Corruption(where() + ": bad type " + Num(type));
  if (codec > 2) return Status::Corruption(where() + ": bad codec " + Num(codec));
  e.type = static_cast<EntryType>(type);
  e.codec = static_cast<Codec>(codec);
  if (e.mode & ~07777u) return Status::Corruption(where() + ": bad mode");
  if (e.type == EntryType::kDir) {
    // Version 3 keeps the size the source gave the directory; it has no frame.
    if ((version_ < 3 && e.size != 0) || e.size > kMaxFileSize || e.stored_len != 0 ||
        e.codec != Codec::kRaw)
      return Status::Corruption(where() + ": directory with data");
    return Emit();
  }
  if (e.size > kMaxFileSize) return Status::Corruption(where() + ": absurd size " + Num(e.size));
  if (e.type == EntryType::kSymlink && (e.codec != Codec::kRaw || e.size == 0 || e.size > kMaxPath))
    return Status::Corruption(where() + ": bad symlink entry");
  if (e.type == EntryType::kHardLink &&
      (e.codec != Codec::kRaw || e.size == 0 || e.size > kMaxPath))
    return Status::Corruption(where() + ": bad hard link entry");
  // A zstd block is at least 3 bytes and decodes to at most 128 KiB: a size beyond that is a
  // claim no frame of this length can back (it would only make a reader allocate).
  if (e.codec != Codec::kRaw && e.size / (128u << 10) > e.stored_len / 3 + 1)
    return Status::Corruption(where() + ": size " + Num(e.size) + " is more than a frame of " +
                              Num(e.stored_len) + " bytes can hold");
  if (e.codec == Codec::kRaw && e.stored_len != e.size)
    return Status::Corruption(where() + ": raw frame length " + Num(e.stored_len) +
                              " differs from size " + Num(e.size));
  if (e.offset < kHeaderSize || e.offset > data_end_ || e.stored_len > data_end_ - e.offset)
    return Status::Corruption(where() + ": frame at offset " + Num(e.offset) + " length " +
                              Num(e.stored_len) + " lies outside the data area [" +
                              Num(kHeaderSize) + ", " + Num(data_end_) + ")");
  return Emit();
}

Status IndexParser::Emit() {
  count_++;
  if (sink_) return sink_(cur_);
  // Grown as entries really arrive, never past the footer's count: a real index ends with its
  // vector exactly full (doubling alone left up to half of it unused: 8 MB at 166,000 entries).
  if (out_.size() == out_.capacity())
    out_.reserve(std::min<size_t>(expected_, std::max<size_t>(16, 2 * out_.capacity())));
  out_.push_back(cur_);
  return Status::OK();
}

Status IndexParser::Feed(std::string_view in) {
  auto more = [&]() -> Status {
    if (count_ < expected_) return Status::OK();
    return Status::Corruption("index has trailing bytes after its " + Num(expected_) +
                              " entries (index byte " + Num(consumed_) + ")");
  };
  // First complete an entry split across the previous piece and this one.
  while (!partial_.empty() && !in.empty()) {
    size_t need = partial_.size() >= fixed_ ? EntryLen(partial_.data()) : fixed_;
    const size_t take = std::min(need - partial_.size(), in.size());
    partial_.append(in.data(), take);
    in.remove_prefix(take);
    if (partial_.size() < fixed_) continue;
    need = EntryLen(partial_.data());
    if (partial_.size() < need) continue;
    FS_RETURN_IF_ERROR(ParseOne(partial_.data()));
    consumed_ += need;
    partial_.clear();
  }
  // Then whole entries straight from the piece, without copying.
  while (!in.empty()) {
    FS_RETURN_IF_ERROR(more());
    if (in.size() < fixed_) break;
    const size_t len = EntryLen(in.data());
    if (in.size() < len) break;
    FS_RETURN_IF_ERROR(ParseOne(in.data()));
    consumed_ += len;
    in.remove_prefix(len);
  }
  if (!in.empty()) {
    FS_RETURN_IF_ERROR(more());
    partial_.assign(in.data(), in.size());
  }
  return Status::OK();
}

Result<std::vector<IndexEntry>> IndexParser::Finish() {
  if (count_ < expected_) {
    const std::string at = "index entry " + Num(count_) + " (index byte " + Num(consumed_) + ")";
    if (partial_.size() >= fixed_) return Status::Corruption(at + ": path runs past the index");
    return Status::Corruption(at + ": truncated");
  }
  if (!partial_.empty())
    return Status::Corruption("index has " + Num(partial_.size()) + " trailing bytes");
  return std::move(out_);
}

Result<std::vector<IndexEntry>> ParseIndexRaw(std::string_view raw, uint64_t data_end,
                                              uint32_t expected_count, uint32_t version) {
  if (uint64_t{expected_count} * EntryFixedSize(version) > raw.size())
    return Status::Corruption("absurd entry count " + Num(expected_count));
  IndexParser parser(data_end, expected_count, version);
  FS_RETURN_IF_ERROR(parser.Feed(raw));
  return parser.Finish();
}

namespace {

// Checks the stored index against the footer and decompresses it into `parser`.
Status Decompress(std::string_view stored, const Footer& f, IndexParser* parser) {
  if (stored.size() != f.index_stored_len) return Status::Corruption("index length mismatch");
  if (Xxh3(stored) != f.index_xxh3)
    return Status::Corruption("index checksum mismatch at offset " + Num(f.index_offset));
  unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
      content != f.index_raw_len)
    return Status::Corruption("index at offset " + Num(f.index_offset) +
                              " is not a zstd frame of " + Num(f.index_raw_len) + " bytes");
  // Decompressed in pieces straight into the parser: a footer that claims 2 GiB costs nothing
  // until the bytes are really there, and a bad entry stops the decoding at once.
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return Status::IOError("zstd: out of memory");
  ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, kMaxWindowLog);
  constexpr size_t kPiece = 256u << 10;
  std::unique_ptr<char[]> out(new char[kPiece]);
  ZSTD_inBuffer ib{stored.data(), stored.size(), 0};
  uint64_t produced = 0;
  size_t last = 1;
  auto fail = [&](const std::string& why) {
    return Status::Corruption("index at offset " + Num(f.index_offset) +
                              " does not decompress: " + why);
  };
  while (true) {
    ZSTD_outBuffer ob{out.get(), kPiece, 0};
    last = ZSTD_decompressStream(dctx.get(), &ob, &ib);
    if (ZSTD_isError(last)) return fail(ZSTD_getErrorName(last));
    produced += ob.pos;
    if (produced > f.index_raw_len) return fail("more than " + Num(f.index_raw_len) + " bytes");
    FS_RETURN_IF_ERROR(parser->Feed(std::string_view(out.get(), ob.pos)));
    if (last == 0) break;
    if (ob.pos == 0 && ib.pos == ib.size) return fail("truncated");
  }
  if (ib.pos != ib.size) return fail("bytes after the end of the zstd frame");
  if (produced != f.index_raw_len) return fail("short");
  return Status::OK();
}

}  // namespace

Result<std::vector<IndexEntry>> DecodeIndex(std::string_view stored, const Footer& f) {
  IndexParser parser(f.index_offset, f.entry_count, f.version);
  FS_RETURN_IF_ERROR(Decompress(stored, f, &parser));
  return parser.Finish();
}

Status ForEachIndexEntry(std::string_view stored, const Footer& f, const IndexEntryFn& fn) {
  IndexParser parser(f.index_offset, f.entry_count, f.version, fn);
  FS_RETURN_IF_ERROR(Decompress(stored, f, &parser));
  return parser.Finish().status();
}

bool LinkStaysInside(std::string_view link_path, std::string_view target, const LookupFn& lookup) {
  // The directory being walked, as components from the root, and what is left of the walk as
  // a stack (next component last).
  std::vector<std::string> dir, rest;
  auto push_components = [&](std::string_view text) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('/', start);
      if (end == std::string_view::npos) end = text.size();
      parts.emplace_back(text.substr(start, end - start));
      start = end + 1;
    }
    rest.insert(rest.end(), parts.rbegin(), parts.rend());
  };
  push_components(link_path);
  rest.erase(rest.begin());  // the link's own name: the walk starts in its directory
  for (auto it = rest.rbegin(); it != rest.rend(); ++it) dir.push_back(*it);
  rest.clear();
  if (target.empty() || target.front() == '/') return false;
  push_components(target);
  int links = 0;
  std::string path, next_target;
  while (!rest.empty()) {
    std::string c = std::move(rest.back());
    rest.pop_back();
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (dir.empty()) return false;
      dir.pop_back();
      continue;
    }
    // The last component is not followed: every symlink is checked on its own.
    if (rest.empty()) return true;
    path.clear();
    for (const auto& d : dir) path += d + "/";
    path += c;
    switch (lookup(path, &next_target)) {
      case NodeKind::kDir:
        dir.push_back(std::move(c));
        break;
      case NodeKind::kLink:
        if (++links > 40) return true;  // ELOOP: resolves to nothing
        if (next_target.empty() || next_target.front() == '/') return false;
        push_components(next_target);  // relative to the link's directory, which is `dir`
        break;
      case NodeKind::kOther:
        return true;  // ENOENT or ENOTDIR: the walk ends inside
    }
  }
  return true;
}

const char* TypeName(EntryType t) {
  switch (t) {
    case EntryType::kFile:
      return "file";
    case EntryType::kDir:
      return "dir";
    case EntryType::kSymlink:
      return "symlink";
    case EntryType::kHardLink:
      return "hard link";
  }
  return "?";
}

}  // namespace fanstore::format
