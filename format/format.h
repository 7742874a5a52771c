// The on-disk dataset format: constants, header/footer codecs and the shard index.
// The specification, precise enough to write a reader from, is docs/format.md.
//
// A dataset NAME.fs/ holds manifest.json, shard-NNNNN.fsd files and optionally dict.zstd.
// Shard layout:  Header (64 B) | frames ... | index (zstd) | Footer (64 B)
// All integers are little-endian. Every number read from a shard is checked against the file's
// real size before it is used.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fanstore::format {

inline constexpr char kShardMagic[8] = {'F', 'S', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr char kFooterMagic[8] = {'F', 'S', 'F', 'O', 'O', 'T', 'R', '1'};
// The version written. Readers take every version from kMinVersion on: version 2 added hard
// links (EntryType::kHardLink); version 3 each entry's ctime, extended attributes and the size
// of directories. An older dataset is a newer one without them (ctime = mtime, none, 0).
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kMinVersion = 1;
inline bool KnownVersion(uint64_t v) { return v >= kMinVersion && v <= kVersion; }
inline constexpr size_t kHeaderSize = 64;
inline constexpr size_t kFooterSize = 64;
// An index entry without its path (and, from version 3, its extended attributes).
inline constexpr size_t kEntryFixedSizeV1 = 48;
inline constexpr size_t kEntryFixedSizeV3 = 60;  // + ctime_ns, the attributes' length
inline size_t EntryFixedSize(uint32_t version) {
  return version >= 3 ? kEntryFixedSizeV3 : kEntryFixedSizeV1;
}
inline constexpr size_t kMaxPath = 4096;
inline constexpr size_t kMaxName = 255;
inline constexpr uint64_t kMaxFileSize = uint64_t{1} << 40;  // 1 TiB
inline constexpr uint64_t kMaxIndexRaw = uint64_t{1} << 31;  // 2 GiB of index per shard
// Limits on what a hostile dataset can make a reader allocate (docs/format.md, "Limits").
inline constexpr uint32_t kMaxEntries = uint32_t{1} << 24;  // index entries per shard
inline constexpr uint64_t kMaxManifestBytes = uint64_t{128} << 20;
inline constexpr uint64_t kMaxShards = uint64_t{1} << 20;
inline constexpr uint64_t kMaxDictBytes = uint64_t{8} << 20;
// zstd frames may use a window of at most 2^kMaxWindowLog bytes: a streaming decoder holds
// one window, so this bounds the memory of decoding any file (writers at levels <= 19 stay
// within it; higher levels are capped).
inline constexpr int kMaxWindowLog = 23;
// Files larger than this (raw or stored) are decoded as a stream in pieces, never whole.
inline constexpr uint64_t kStreamAbove = uint64_t{4} << 20;
// The most FrameDecoder::Decode decodes in memory; larger files must be streamed.
inline constexpr uint64_t kMaxWholeFrame = uint64_t{256} << 20;
inline constexpr char kManifestName[] = "manifest.json";
inline constexpr char kDictName[] = "dict.zstd";
inline constexpr char kFormatName[] = "fanstore";

// kHardLink (version 2): another name of a regular file of the dataset, whose relative path is
// the entry's data (stored raw, as a symlink's target); its mode and mtime are the file's.
enum class EntryType : uint8_t { kFile = 1, kDir = 2, kSymlink = 3, kHardLink = 4 };
enum class Codec : uint8_t { kRaw = 0, kZstd = 1, kZstdDict = 2 };

struct Header {
  uint32_t version = kVersion;
  uint32_t shard_id = 0;
  uint64_t dataset_id = 0;
};

struct Footer {
  uint64_t index_offset = 0;
  uint64_t index_stored_len = 0;
  uint64_t index_raw_len = 0;
  uint64_t index_xxh3 = 0;  // of the stored (compressed) index bytes
  uint32_t entry_count = 0;
  uint32_t version = kVersion;
  uint32_t shard_id = 0;
  uint64_t dataset_id = 0;
};

// An entry's extended attributes, encoded (common/xattrs.h): nearly always none, so one pointer,
// null for none; a copy copies the list.
class XattrList {
 public:
  XattrList() = default;
  explicit XattrList(std::string_view enc)
      : p_(enc.empty() ? nullptr : std::make_unique<std::string>(enc)) {}
  XattrList(const XattrList& o) : XattrList(o.view()) {}
  XattrList& operator=(const XattrList& o) {
    if (this != &o) *this = XattrList(o.view());
    return *this;
  }
  XattrList(XattrList&&) noexcept = default;
  XattrList& operator=(XattrList&&) noexcept = default;
  std::string_view view() const { return p_ ? std::string_view(*p_) : std::string_view(); }

 private:
  std::unique_ptr<std::string> p_;
};

// One namespace entry as stored in a shard's index.
struct IndexEntry {
  EntryType type = EntryType::kFile;
  Codec codec = Codec::kRaw;
  uint32_t mode = 0;  // permission bits (07777)
  uint64_t size = 0;  // raw bytes (symlink: target length; directory: as the source said, or 0)
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;     // version 3; older versions: mtime_ns
  uint64_t offset = 0;      // of the frame within the shard
  uint64_t stored_len = 0;  // bytes of the frame
  uint64_t xxh3 = 0;        // of the raw content (symlink: of the target)
  std::string path;         // relative, canonical
  XattrList xattrs;         // version 3: files and directories
  std::string_view Xattrs() const { return xattrs.view(); }
};

std::string EncodeHeader(const Header& h);
// Checks magic and version.
Status DecodeHeader(std::string_view bytes, Header* h);
std::string EncodeFooter(const Footer& f);
// Checks magic, version and that the index lies between the header and the footer of a file of
// `file_size` bytes, with sane lengths.
Status DecodeFooter(std::string_view bytes, uint64_t file_size, Footer* f);

// In the layout of `version` (older versions drop what they cannot hold).
std::string EncodeIndexRaw(const std::vector<IndexEntry>& entries, uint32_t version = kVersion);
// Parses and validates a raw (decompressed) index of a shard of `version`. Frames must lie in
// [kHeaderSize, data_end).
Result<std::vector<IndexEntry>> ParseIndexRaw(std::string_view raw, uint64_t data_end,
                                              uint32_t expected_count, uint32_t version = kVersion);
// Checks the stored index against the footer (hash, lengths), decompresses and parses it as a
// stream: the raw index is never held whole, and memory grows only with the entries actually
// decoded, whatever the footer claims.
Result<std::vector<IndexEntry>> DecodeIndex(std::string_view stored, const Footer& f);

// Calls fn for each entry of an index as it is decoded (DecodeIndex without the vector: the
// entry is reused, valid only during the call).
using IndexEntryFn = std::function<Status(const IndexEntry&)>;
Status ForEachIndexEntry(std::string_view stored, const Footer& f, const IndexEntryFn& fn);

// Incremental ParseIndexRaw: Feed() the raw index in pieces of any size, then Finish(). With
// `sink`, each entry goes to it instead of into the vector Finish returns (then empty).
class IndexParser {
 public:
  IndexParser(uint64_t data_end, uint32_t expected_count, uint32_t version = kVersion,
              IndexEntryFn sink = nullptr);
  Status Feed(std::string_view piece);
  Result<std::vector<IndexEntry>> Finish();

 private:
  Status ParseOne(const char* p);  // the entry whose fixed part starts at p, into cur_
  Status Emit();                   // cur_ is complete
  // That entry's lengths: the whole, its path, its extended attributes.
  size_t EntryLen(const char* p) const;
  static size_t PathLen(const char* p);
  size_t XattrLen(const char* p) const;
  uint64_t data_end_;
  uint32_t expected_;
  uint32_t version_;
  size_t fixed_;
  uint64_t consumed_ = 0;  // raw bytes of the complete entries parsed so far
  std::string partial_;    // an entry split across pieces
  IndexEntryFn sink_;
  uint32_t count_ = 0;  // entries parsed
  IndexEntry cur_;      // the entry being parsed (its path's buffer is reused)
  std::vector<IndexEntry> out_;
};

// True for a relative, canonical path: no leading or trailing '/', no empty, "." or ".."
// component, no NUL, within kMaxPath and kMaxName.
bool IsSafePath(std::string_view p);
// For a symlink at `link_path` with `target`: true when the target is relative and, resolved
// lexically from the link's directory, stays inside the dataset.
bool IsContainedLink(std::string_view link_path, std::string_view target);

// What a path of a namespace is, for LinkStaysInside.
enum class NodeKind { kDir, kLink, kOther };  // kOther: a file, or nothing at all
// Looks `path` up; for a symlink sets *target.
using LookupFn = std::function<NodeKind(const std::string& path, std::string* target)>;
// Resolves the target of the symlink at `link_path` from the link's directory through the
// namespace, expanding its symlinks as the kernel does: true when no step leaves the root.
// IsContainedLink is lexical only: `x/esc -> up/../..` passes it when `x/up -> .`.
bool LinkStaysInside(std::string_view link_path, std::string_view target, const LookupFn& lookup);

const char* TypeName(EntryType t);

}  // namespace fanstore::format
