// The node's metadata table: a read-only, lock-free image of the whole dataset namespace,
// built once by the agent in shared memory (common/table_builder.h) and mapped by every client
// process. This header is the layout, what the agent and its clients share, and the view.
//
// Layout (all little-endian, offsets from the start of the mapping):
//   Header | buckets: Bucket[bucket_count] | entries: Entry[entry_count] |
//   children: uint32[] | strings | xattrs: XattrRef[xattr_count]
// Entry 0 is the root directory (relative path ""); the others come in the builder's order
// (NodeSource). Paths are relative to the mount, without a leading '/'. Lookup is open
// addressing on XXH3(path) with linear probing (Probe). Children of a directory are contiguous
// in `children`, sorted by name.
//
// Thread safety: a TableView is immutable after Open() and safe to share between threads, with
// one exception: while it serves, the agent may set kLocal on a file's entry (never clear it)
// when it unpacks that file after the table was published; readers load `flags` atomically
// (EntryFlagsOf).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fanstore::table {

inline constexpr char kMagic[8] = {'F', 'S', 'T', 'A', 'B', 'L', 'E', '1'};
// 2: the source of each file, dataset and reader paths; 3: hard links (kHardLink), which a
// reader of 2 would take for files with a shard number in `aux`; 4: ctime in place of the
// inode number (derived from the hash), extended attributes (kXattrs), directory sizes; 5: a
// bucket holds its entry's path offset beside the entry index; 6: and its hash's tag.
inline constexpr uint32_t kVersion = 6;
inline constexpr uint32_t kNone = 0xffffffffu;

enum EntryFlags : uint32_t {
  kLocal = 1u << 0,  // file is materialised at <local_root>/<path>
  // Lazy unpack, until kLocal: the file's bytes are stored raw in this node's verified copy of
  // its shard, <local_root>/../<kCopyDir>/<CopyName(shard)> (shard in `aux`), at offset
  // RawCopyOffset(entry), so a client may unpack it itself instead of asking the agent.
  kRawCopy = 1u << 1,
  // Another name of the regular file at entry `aux` (a hard link): its data, attributes and
  // inode number are that entry's (TableView::Target).
  kHardLink = 1u << 2,
  // Has extended attributes: a XattrRef names the entry (TableView::Xattrs).
  kXattrs = 1u << 3,
};
// Regular files: how many other names (hard links) the file has, in the flags' bits from here.
inline constexpr uint32_t kExtraNamesShift = 8;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t entry_count;
  uint64_t total_size;
  uint32_t bucket_count;  // more than entry_count; a hash's first slot is Slot(hash, count)
  uint32_t local_root_len;
  uint64_t buckets_off;
  uint64_t entries_off;
  uint64_t children_off;
  uint64_t children_count;
  uint64_t strings_off;
  uint64_t strings_size;
  uint64_t local_root_off;  // into strings
  uint64_t cache_root_off;  // into strings: where the agent caches files fetched from peers
  uint32_t cache_root_len;
  uint32_t dataset_len;
  uint64_t dev;  // st_dev reported for every entry
  uint64_t dataset_id;
  uint32_t uid, gid;  // owner reported for every entry
  // Where a file can be read without the agent: the dataset directory, and a program that
  // prints one file of it (`TOOL --read-entry DATASET SHARD INDEX`). Both into strings.
  uint64_t dataset_off;
  uint64_t tool_off;
  uint32_t tool_len;
  uint32_t xattr_count;
  uint64_t xattrs_off;  // XattrRef[xattr_count], sorted by entry
  // A process-shared robust mutex the agent holds while it serves (AgentLock). Clients
  // read its lock word without a syscall: when the agent dies, even by SIGKILL, the kernel
  // marks the word FUTEX_OWNER_DIED; after a clean shutdown it is 0.
  alignas(8) unsigned char agent_lock[64];
};

struct Entry {
  uint64_t hash;  // XXH3 of the relative path; the inode number is derived from it (Ino)
  uint64_t size;  // bytes; symlink: length of the target; directory: as packed, 0 for unknown
  int64_t mtime_ns;
  int64_t ctime_ns;
  uint32_t path_off;  // into strings
  uint32_t path_len;
  uint32_t parent;  // entry index; the root is its own parent
  // A directory's children are children[first_child, first_child + child_count); a symlink has
  // none (count 0). A regular file has none either and keeps other things in these two fields:
  // first_child is its index in its shard (the shard is `aux`; TableView::Source), child_count
  // its frame's offset in this node's copy of that shard when kRawCopy is set, else 0
  // (RawCopyOffset). A hard link: kNone and 0 (its file's entry holds them).
  uint32_t first_child;
  uint32_t child_count;
  uint32_t mode;   // full st_mode, type bits included
  uint32_t flags;  // EntryFlags
  uint32_t aux;    // symlink: target offset in strings; directory: number of subdirectories;
                   // file: its shard (kNone: unknown); hard link: its file's entry
};
static_assert(sizeof(Entry) == 64);

inline uint32_t EntryFlagsOf(const Entry& e) { return __atomic_load_n(&e.flags, __ATOMIC_ACQUIRE); }
inline bool IsDir(const Entry& e) { return S_ISDIR(e.mode); }
inline bool IsReg(const Entry& e) { return S_ISREG(e.mode); }
inline bool IsLink(const Entry& e) { return S_ISLNK(e.mode); }
// Where a kRawCopy file's frame starts in this node's copy of its shard (see kRawCopy).
inline uint32_t RawCopyOffset(const Entry& e) { return e.child_count; }

// A slot of the hash table: the entry, where its path is, and the high half of its hash. A
// probe passes over another path's slot on the tag alone, without loading that entry (at load
// 1/2, linear probing looks at 1.5 slots per hit and 2.5 per miss), and loads the entry and its
// path at once: two cache misses in a row, bucket then entry, in a table much larger than the
// caches.
struct Bucket {
  uint32_t entry;     // kNone: empty
  uint32_t path_off;  // the entry's path_off
  uint32_t tag;       // Tag(the entry's hash)
};
static_assert(sizeof(Bucket) == 12);
inline uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash >> 32); }

// The first slot of a hash among `count` (multiply-shift on its low half: any count, no
// division), and the slot probed after `b` (linear probing, wrapping around).
inline uint32_t Slot(uint64_t hash, uint32_t count) {
  return static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(hash)} * count) >> 32);
}
inline uint32_t NextSlot(uint32_t b, uint32_t count) { return b + 1 == count ? 0 : b + 1; }

// The entry of `rel` (whose XXH3 is `h`) among `count` slots, or kNone: the one probe of the
// builder (hard links) and of every lookup. Bounded by the slot count.
inline uint32_t Probe(const Bucket* buckets, uint32_t count, const Entry* entries,
                      const char* strings, std::string_view rel, uint64_t h) {
  const uint32_t tag = Tag(h);
  for (uint32_t b = Slot(h, count), probes = 0; probes < count; b = NextSlot(b, count), probes++) {
    const Bucket bk = buckets[b];
    if (bk.entry == kNone) return kNone;
    if (bk.tag != tag) continue;
    // The path's line is fetched while the entry's is (a prefetch never faults, whatever the
    // offset); the comparison below reads the entry's own offset.
    __builtin_prefetch(
        reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(strings) + bk.path_off));
    const Entry& e = entries[bk.entry];
    if (e.hash == h && e.path_len == rel.size() &&
        std::memcmp(strings + e.path_off, rel.data(), rel.size()) == 0)
      return bk.entry;
  }
  return kNone;
}

// The extended attributes of entry `entry`: `len` bytes at `off` in strings, encoded
// (common/xattrs.h).
struct XattrRef {
  uint32_t entry;
  uint32_t len;
  uint64_t off;
};

// The cache file name of an entry: its path hash as 16 lowercase hex digits, written into
// out[0..16] (no terminator). Shared by the agent (writer) and the interceptor (reader).
void CacheName(uint64_t path_hash, char out[16]);

// Opens counted by the clients themselves: opens of staged and cached files never reach the
// agent, so each client adds to these shared counters (one atomic add per open). The agent
// creates the file (kCountersName next to the table, mode 0600) and reads it for its stats.
// Lazy unpack's shard copies are <local_root>/../<kCopyDir>/<shard id in decimal>: the agent
// writes them there and clients read raw frames from them (kRawCopy).
inline constexpr char kCopyDir[] = "shards";
inline std::string CopyName(uint32_t shard) { return std::to_string(shard); }

struct ClientCounters {
  uint64_t local_opens, local_bytes;    // staged on this node
  uint64_t cached_opens, cached_bytes;  // fetched from a peer earlier, opened from the cache
  uint64_t self_unpacks;                // kRawCopy files a client unpacked itself
  uint64_t reserved[11];
};
inline constexpr char kCountersName[] = "counters";
// Maps <dir>/counters read-write (creating it when `create`); nullptr on failure.
ClientCounters* MapCounters(const std::string& dir, bool create);
inline void CountOpen(uint64_t* opens, uint64_t* bytes, uint64_t n) {
  __atomic_fetch_add(opens, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(bytes, n, __ATOMIC_RELAXED);
}

// Stable inode number for a relative path.
uint64_t InodeFor(uint64_t path_hash);

class TableView {
 public:
  TableView() = default;
  ~TableView();
  TableView(const TableView&) = delete;
  TableView& operator=(const TableView&) = delete;

  // Maps the table file read-only and validates its structure: the header and section bounds
  // always; every entry too when `check_entries` (O(entries): the agent's own check and tests).
  // Clients skip the per-entry pass so that process start stays O(1): the table comes from the
  // job's own agent through a 0700 directory.
  Status Open(const std::string& path, bool check_entries = true);
  // Uses an in-memory image (tests, the agent itself). `image` must outlive the view.
  Status Attach(std::string_view image);

  bool valid() const { return base_ != nullptr; }
  const Header& header() const { return *hdr_; }
  uint32_t size() const { return hdr_->entry_count; }
  const Entry& at(uint32_t i) const { return entries_[i]; }
  uint32_t IndexOf(const Entry& e) const { return static_cast<uint32_t>(&e - entries_); }

  // Exact lookup of a canonical relative path; nullptr when absent. Paths with symlinks or
  // dot components are the interceptor's to resolve (interceptor/resolver.h).
  const Entry* Lookup(std::string_view rel) const;

  std::string_view Path(const Entry& e) const { return {strings_ + e.path_off, e.path_len}; }
  std::string_view Name(const Entry& e) const;
  std::string_view LinkTarget(const Entry& e) const { return {strings_ + e.aux, e.size}; }
  std::string_view LocalRoot() const {
    return {strings_ + hdr_->local_root_off, hdr_->local_root_len};
  }
  std::string_view CacheRoot() const {
    return {strings_ + hdr_->cache_root_off, hdr_->cache_root_len};
  }
  std::string_view Dataset() const { return {strings_ + hdr_->dataset_off, hdr_->dataset_len}; }
  std::string_view Tool() const { return {strings_ + hdr_->tool_off, hdr_->tool_len}; }
  // The entry that holds e's data and attributes: e itself, or the file a hard link names.
  const Entry& Target(const Entry& e) const { return (e.flags & kHardLink) ? entries_[e.aux] : e; }
  uint64_t Ino(const Entry& e) const { return InodeFor(Target(e).hash); }
  // e's extended attributes, encoded (common/xattrs.h); empty for none.
  std::string_view Xattrs(const Entry& e) const;
  // Where the dataset holds regular file e; false when the table does not say.
  bool Source(const Entry& alias, uint32_t* shard, uint32_t* index) const {
    const Entry& e = Target(alias);
    if (!IsReg(e) || e.aux == kNone) return false;
    *shard = e.aux;
    *index = e.first_child;
    return true;
  }
  std::span<const uint32_t> Children(const Entry& e) const {
    // A file's fields hold its source and raw-copy offset (Entry::first_child).
    if (IsReg(e) || e.child_count == 0) return {};
    return {children_ + e.first_child, e.child_count};
  }

  void FillStat(const Entry& e, struct stat* st) const;
  // True while the agent that built this table is alive and serving. A plain memory load.
  bool AgentAlive() const;

 private:
  Status Validate(size_t len, bool check_entries);
  void Unmap();

  const char* base_ = nullptr;
  size_t map_len_ = 0;
  bool mapped_ = false;
  const Header* hdr_ = nullptr;
  const Bucket* buckets_ = nullptr;
  const Entry* entries_ = nullptr;
  const uint32_t* children_ = nullptr;
  const char* strings_ = nullptr;
  const XattrRef* xattrs_ = nullptr;
};

}  // namespace fanstore::table
