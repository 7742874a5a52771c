// The metadata table's view (see table.h), and what the agent and its clients share.
#include "common/table.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/hash.h"
#include "common/unique_fd.h"

namespace fanstore::table {

ClientCounters* MapCounters(const std::string& dir, bool create) {
  const std::string path = dir + "/" + kCountersName;
  int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0);
  UniqueFD fd(::open(path.c_str(), flags, 0600));
  if (!fd.valid()) return nullptr;
  if (create && ::ftruncate(fd.get(), sizeof(ClientCounters)) != 0) return nullptr;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || st.st_size < static_cast<off_t>(sizeof(ClientCounters)))
    return nullptr;
  void* p =
      ::mmap(nullptr, sizeof(ClientCounters), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  return p == MAP_FAILED ? nullptr : static_cast<ClientCounters*>(p);
}

void CacheName(uint64_t path_hash, char out[16]) {
  static const char kHex[] = "0123456789abcdef";
  for (int i = 15; i >= 0; i--, path_hash >>= 4) out[i] = kHex[path_hash & 15];
}

uint64_t InodeFor(uint64_t path_hash) {
  uint64_t ino = path_hash & 0x7fffffffffffffffULL;
  return ino == 0 ? 1 : ino;
}

bool TableView::AgentAlive() const {
  // glibc keeps the owner's TID in the first word of a robust mutex (__data.__lock); the kernel
  // sets FUTEX_OWNER_DIED there when the owner exits without unlocking.
  uint32_t word =
      __atomic_load_n(reinterpret_cast<const uint32_t*>(hdr_->agent_lock), __ATOMIC_ACQUIRE);
  return (word & FUTEX_TID_MASK) != 0 && (word & FUTEX_OWNER_DIED) == 0;
}

TableView::~TableView() { Unmap(); }

void TableView::Unmap() {
  if (mapped_ && base_) ::munmap(const_cast<char*>(base_), map_len_);
  base_ = nullptr;
  mapped_ = false;
}

Status TableView::Open(const std::string& path, bool check_entries) {
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("table: open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("table: stat " + path, errno);
  if (st.st_size < static_cast<off_t>(sizeof(Header)))
    return Status::Corruption("table: " + path + " too short");
  void* p = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno("table: mmap " + path, errno);
  Unmap();
  base_ = static_cast<const char*>(p);
  map_len_ = st.st_size;
  mapped_ = true;
  Status s = Validate(map_len_, check_entries);
  if (!s.ok()) Unmap();
  return s;
}

Status TableView::Attach(std::string_view image) {
  Unmap();
  base_ = image.data();
  map_len_ = image.size();
  Status s = Validate(map_len_, true);
  if (!s.ok()) base_ = nullptr;
  return s;
}

Status TableView::Validate(size_t len, bool check_entries) {
  if (len < sizeof(Header) || reinterpret_cast<uintptr_t>(base_) % 8 != 0)
    return Status::Corruption("table: too short");
  hdr_ = reinterpret_cast<const Header*>(base_);
  const Header& h = *hdr_;
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return Status::Corruption("table: bad magic");
  if (h.version != kVersion) return Status::Corruption("table: unsupported version");
  auto fits = [len](uint64_t off, uint64_t bytes) { return off <= len && bytes <= len - off; };
  if (h.total_size != len || h.entry_count == 0 || h.bucket_count == 0 ||
      h.bucket_count <= h.entry_count ||
      !fits(h.buckets_off, uint64_t{h.bucket_count} * sizeof(Bucket)) ||
      !fits(h.entries_off, uint64_t{h.entry_count} * sizeof(Entry)) ||
      !fits(h.children_off, h.children_count * 4) || !fits(h.strings_off, h.strings_size) ||
      h.entries_off % 8 != 0 || h.buckets_off % 8 != 0 || h.children_off % 4 != 0 ||
      h.local_root_off + h.local_root_len > h.strings_size ||
      h.cache_root_off + h.cache_root_len > h.strings_size || h.dataset_off > h.strings_size ||
      h.dataset_len > h.strings_size - h.dataset_off || h.tool_off > h.strings_size ||
      h.tool_len > h.strings_size - h.tool_off || h.xattrs_off % 8 != 0 ||
      !fits(h.xattrs_off, uint64_t{h.xattr_count} * sizeof(XattrRef)))
    return Status::Corruption("table: inconsistent header");
  buckets_ = reinterpret_cast<const Bucket*>(base_ + h.buckets_off);
  entries_ = reinterpret_cast<const Entry*>(base_ + h.entries_off);
  children_ = reinterpret_cast<const uint32_t*>(base_ + h.children_off);
  strings_ = base_ + h.strings_off;
  xattrs_ = reinterpret_cast<const XattrRef*>(base_ + h.xattrs_off);
  if (!S_ISDIR(entries_[0].mode) || entries_[0].path_len != 0)
    return Status::Corruption("table: bad root");
  if (!check_entries) return Status::OK();
  for (uint32_t i = 0; i < h.entry_count; i++) {
    const Entry& e = entries_[i];
    if (uint64_t{e.path_off} + e.path_len > h.strings_size || e.parent >= h.entry_count ||
        (!S_ISREG(e.mode) && uint64_t{e.first_child} + e.child_count > h.children_count) ||
        (S_ISREG(e.mode) && RawCopyOffset(e) != 0 && !(e.flags & kRawCopy)) ||
        ((e.flags & kHardLink) &&
         (!S_ISREG(e.mode) || e.aux >= h.entry_count || !S_ISREG(entries_[e.aux].mode) ||
          (entries_[e.aux].flags & kHardLink))) ||
        (S_ISLNK(e.mode) && uint64_t{e.aux} + e.size > h.strings_size))
      return Status::Corruption("table: entry out of bounds");
  }
  for (uint64_t i = 0; i < h.children_count; i++)
    if (children_[i] >= h.entry_count) return Status::Corruption("table: child out of bounds");
  for (uint32_t i = 0; i < h.xattr_count; i++)
    if (xattrs_[i].off > h.strings_size || xattrs_[i].len > h.strings_size - xattrs_[i].off ||
        xattrs_[i].entry >= h.entry_count || (i > 0 && xattrs_[i].entry <= xattrs_[i - 1].entry))
      return Status::Corruption("table: extended attributes out of bounds");
  for (uint32_t i = 0; i < h.bucket_count; i++)
    if (buckets_[i].entry != kNone &&
        (buckets_[i].entry >= h.entry_count ||
         buckets_[i].path_off != entries_[buckets_[i].entry].path_off ||
         buckets_[i].tag != Tag(entries_[buckets_[i].entry].hash)))
      return Status::Corruption("table: bucket out of bounds");
  if (!S_ISDIR(entries_[0].mode) || entries_[0].path_len != 0)
    return Status::Corruption("table: bad root");
  return Status::OK();
}

std::string_view TableView::Name(const Entry& e) const {
  std::string_view p = Path(e);
  size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

const Entry* TableView::Lookup(std::string_view rel) const {
  const uint32_t i = Probe(buckets_, hdr_->bucket_count, entries_, strings_, rel, Xxh3(rel));
  return i == kNone ? nullptr : &entries_[i];
}

void TableView::FillStat(const Entry& name, struct stat* st) const {
  const Entry& e = Target(name);  // a hard link is its file
  std::memset(st, 0, sizeof *st);
  st->st_dev = hdr_->dev;
  st->st_ino = InodeFor(e.hash);
  st->st_mode = e.mode;
  st->st_nlink = IsDir(e) ? 2 + e.aux : 1 + (e.flags >> kExtraNamesShift);
  st->st_uid = hdr_->uid;
  st->st_gid = hdr_->gid;
  // Sizes and blocks as ext4 reports them (directories one 4 KiB block, files whole 4 KiB
  // blocks), so `du` and `ls -l` agree with the source tree on the usual local file system.
  const uint64_t bytes = IsDir(e) && e.size == 0 ? 4096 : e.size;
  st->st_size = static_cast<off_t>(bytes);
  st->st_blksize = 4096;
  st->st_blocks = IsLink(e) ? 0 : static_cast<blkcnt_t>((bytes + 4095) / 4096 * 8);
  st->st_mtim.tv_sec = e.mtime_ns / 1000000000;
  st->st_mtim.tv_nsec = e.mtime_ns % 1000000000;
  st->st_atim = st->st_mtim;
  st->st_ctim.tv_sec = e.ctime_ns / 1000000000;
  st->st_ctim.tv_nsec = e.ctime_ns % 1000000000;
}

std::string_view TableView::Xattrs(const Entry& name) const {
  const Entry& e = Target(name);
  if (!(e.flags & kXattrs)) return {};
  const uint32_t want = IndexOf(e);
  const XattrRef* end = xattrs_ + hdr_->xattr_count;
  const XattrRef* r = std::lower_bound(xattrs_, end, want,
                                       [](const XattrRef& x, uint32_t v) { return x.entry < v; });
  // Checked here, not at Open: clients skip the per-entry pass (Validate).
  if (r == end || r->entry != want || r->off > hdr_->strings_size ||
      r->len > hdr_->strings_size - r->off)
    return {};
  return {strings_ + r->off, r->len};
}

}  // namespace fanstore::table
