// The metadata exchange's message (see exchange.h).
#include "agent/exchange.h"

#include <xxhash.h>

#include <cstring>

namespace fanstore::agent::exchange {
namespace {

constexpr uint32_t kMagic = 0x58534d46;  // "FMSX"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kPointerMagic = 0x50534d46;  // "FMSP"

void Put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void Put64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void PutStr(std::string& s, std::string_view v) {
  Put32(s, static_cast<uint32_t>(v.size()));
  s.append(v);
}

// Bounds-checked reads from a message: every length comes from the peer.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool U32(uint32_t* v) { return Fixed(v, 4); }
  bool U64(uint64_t* v) { return Fixed(v, 8); }
  bool Bytes(size_t n, std::string_view* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Str(std::string_view* out) {
    uint32_t n;
    return U32(&n) && Bytes(n, out);
  }

 private:
  bool Fixed(void* v, size_t n) {
    if (b_.size() - pos_ < n) return false;
    std::memcpy(v, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view b_;
  size_t pos_ = 0;
};

Status ReadHead(Reader& rd, uint32_t rank) {
  uint32_t magic, version, ok;
  std::string_view err;
  if (!rd.U32(&magic) || magic != kMagic || !rd.U32(&version) || version != kVersion ||
      !rd.U32(&ok) || !rd.Str(&err))
    return Status::Corruption("metadata exchange: bad data from rank " + std::to_string(rank));
  if (!ok)
    return Status::Aborted("agent of rank " + std::to_string(rank) +
                           " failed: " + std::string(err));
  return Status::OK();
}

// One shard record of rank `r`'s message into `out`.
// `own` is ours by shard id (nullptr: not held here).
Status ReadRecord(Reader& rd, uint32_t r, uint32_t self,
                  const std::vector<const format::ShardFile*>& own, std::vector<bool>& seen,
                  Decoded* out) {
  const uint32_t nshards = static_cast<uint32_t>(out->index.size());
  uint32_t shard, nlinks;
  uint64_t file_size;
  std::string_view footer_bytes, stored;
  if (!rd.U32(&shard) || shard >= nshards || seen[shard] || !rd.U64(&file_size) ||
      !rd.Bytes(format::kFooterSize, &footer_bytes) || !rd.Str(&stored))
    return Status::Corruption("metadata exchange: bad shard record from rank " + std::to_string(r));
  seen[shard] = true;
  if (own[shard]) {
    // A shard held here: our own bytes (our message's, or the index read at open when another
    // holder published it), checked against our footer. A peer's bytes are never trusted for
    // a shard this node serves.
    out->index[shard] = StoredIndex{
        own[shard]->footer, r == self ? stored : std::string_view(own[shard]->index_stored)};
  } else if (r == self) {
    return Status::Corruption("metadata exchange: shard " + std::to_string(shard) +
                              " published by this agent, which does not hold it");
  } else {
    format::Footer f;
    Status fs = format::DecodeFooter(footer_bytes, file_size, &f);
    if (!fs.ok()) return fs.Prefixed("metadata exchange: shard " + std::to_string(shard));
    out->index[shard] = StoredIndex{f, stored};
  }
  if (!rd.U32(&nlinks)) return Status::Corruption("metadata exchange: bad link list");
  for (uint32_t k = 0; k < nlinks; k++) {
    std::string_view p, t;
    if (!rd.Str(&p) || !rd.Str(&t) || !format::IsContainedLink(p, t))
      return Status::Corruption("metadata exchange: bad link");
    out->links.emplace(std::string(p), std::string(t));
  }
  return Status::OK();
}

}  // namespace

std::string EncodeHead(const Status& st) {
  std::string b;
  Put32(b, kMagic);
  Put32(b, kVersion);
  Put32(b, st.ok() ? 1 : 0);
  PutStr(b, st.ok() ? "" : st.ToString());
  return b;
}

Status CheckHead(std::string_view message, uint32_t rank) {
  Reader rd(message);
  return ReadHead(rd, rank);
}

std::string Encode(const std::string& endpoint, const std::vector<Published>& primary) {
  std::string blob = EncodeHead(Status::OK());
  PutStr(blob, endpoint);
  Put32(blob, static_cast<uint32_t>(primary.size()));
  for (const auto& [sh, links] : primary) {
    Put32(blob, sh->header.shard_id);
    Put64(blob, sh->size);
    blob += format::EncodeFooter(sh->footer);
    PutStr(blob, sh->index_stored);
    Put32(blob, static_cast<uint32_t>(links->size()));
    for (const auto& [p, t] : *links) {
      PutStr(blob, p);
      PutStr(blob, t);
    }
  }
  return blob;
}

bool Pointer::Matches(std::string_view message) const {
  const XXH128_hash_t h = XXH3_128bits(message.data(), message.size());
  return message.size() == size && h.low64 == hash_lo && h.high64 == hash_hi;
}

std::string EncodePointer(const std::string& endpoint, std::string_view message) {
  const XXH128_hash_t h = XXH3_128bits(message.data(), message.size());
  std::string b;
  Put32(b, kPointerMagic);
  Put32(b, kVersion);
  PutStr(b, endpoint);
  Put64(b, message.size());
  Put64(b, h.low64);
  Put64(b, h.high64);
  return b;
}

Result<std::vector<std::optional<Pointer>>> ReadPointers(const std::vector<std::string>& all) {
  std::vector<std::optional<Pointer>> out(all.size());
  for (uint32_t r = 0; r < all.size(); r++) {
    Reader rd(all[r]);
    uint32_t magic = 0, version = 0;
    if (all[r].size() < 4 || (std::memcpy(&magic, all[r].data(), 4), magic != kPointerMagic)) {
      FS_RETURN_IF_ERROR(ReadHead(rd, r));  // a failed agent's head, or a whole message
      continue;
    }
    Pointer p;
    std::string_view ep;
    if (!rd.U32(&magic) || !rd.U32(&version) || version != kVersion || !rd.Str(&ep) ||
        !rd.U64(&p.size) || !rd.U64(&p.hash_lo) || !rd.U64(&p.hash_hi))
      return Status::Corruption("metadata exchange: bad pointer from rank " + std::to_string(r));
    p.endpoint = std::string(ep);
    out[r] = std::move(p);
  }
  return out;
}

Result<Decoded> Decode(const std::vector<std::string>& all, uint32_t nshards, uint32_t self,
                       const std::vector<const format::ShardFile*>& own) {
  return Decode(std::vector<std::string_view>(all.begin(), all.end()), nshards, self, own);
}

Result<Decoded> Decode(const std::vector<std::string_view>& all, uint32_t nshards, uint32_t self,
                       const std::vector<const format::ShardFile*>& own) {
  Decoded d;
  d.index.assign(nshards, {});
  std::vector<const format::ShardFile*> by_id(nshards, nullptr);
  for (const format::ShardFile* sh : own)
    if (sh->header.shard_id < nshards) by_id[sh->header.shard_id] = sh;
  d.endpoints.resize(all.size());
  std::vector<bool> seen(nshards, false);
  for (uint32_t r = 0; r < all.size(); r++) {
    d.bytes += all[r].size();
    Reader rd(all[r]);
    FS_RETURN_IF_ERROR(ReadHead(rd, r));
    uint32_t records;
    std::string_view endpoint;
    if (!rd.Str(&endpoint) || !rd.U32(&records))
      return Status::Corruption("metadata exchange: bad data from rank " + std::to_string(r));
    d.endpoints[r] = std::string(endpoint);
    for (uint32_t i = 0; i < records; i++)
      FS_RETURN_IF_ERROR(ReadRecord(rd, r, self, by_id, seen, &d));
  }
  for (uint32_t s = 0; s < nshards; s++)
    if (!seen[s])
      return Status::Corruption("metadata exchange: no agent published shard " + std::to_string(s));
  return d;
}

Status CheckLinks(const std::unordered_map<std::string, std::string>& links,
                  const std::function<bool(const std::string&)>& is_dir) {
  auto lookup = [&](const std::string& path, std::string* target) {
    if (path.empty() || is_dir(path)) return format::NodeKind::kDir;
    auto it = links.find(path);
    if (it == links.end()) return format::NodeKind::kOther;
    *target = it->second;
    return format::NodeKind::kLink;
  };
  for (const auto& [path, target] : links)
    if (!format::LinkStaysInside(path, target, lookup))
      return Status::Corruption("metadata exchange: symlink '" + path +
                                "' leads out of the dataset");
  return Status::OK();
}

}  // namespace fanstore::agent::exchange
