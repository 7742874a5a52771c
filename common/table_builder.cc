// The table builder (see table_builder.h): two passes over the nodes, a census then the image
// written in place; and the agent's file image and lock.
#include "common/table_builder.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "common/hash.h"
#include "common/path.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"

namespace fanstore::table {
namespace {

std::string_view ParentOf(std::string_view p) {
  size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : p.substr(0, slash);
}

uint64_t Align8(uint64_t v) { return (v + 7) & ~uint64_t{7}; }

// The strings a node adds to the table: its path, and its text (a symlink's target, the file a
// hard link names, or extended attributes).
uint64_t StringBytes(const Node& nd) { return nd.path.size() + nd.text.size(); }

// What the first pass learns: how large the image is, and which parent directories nobody
// gave (added after the given nodes, each with the mtime of a node under it).
struct Census {
  uint32_t given = 0;
  uint64_t string_bytes = 0;
  uint32_t xattr_count = 0;
  std::map<std::string, int64_t, std::less<>> missing;  // by path: the order is the image's
};

// Sets of paths looked up by view, without a copy.
struct PathHash {
  using is_transparent = void;
  size_t operator()(std::string_view v) const { return Xxh3(v); }
};
using PathSet = std::unordered_set<std::string, PathHash, std::equal_to<>>;
using PathTimes = std::unordered_map<std::string, int64_t, PathHash, std::equal_to<>>;

// The string area's limit (offsets are 32-bit), checked as the strings are counted: a hostile
// index cannot make the census itself grow past what a table could hold.
constexpr uint64_t kMaxStrings = 0xffff0000u;

// What the first pass learns of one part of the source: its counts, its directories, and the
// parents its nodes name, in the order it first names them.
struct PartCensus {
  uint32_t given = 0;
  uint64_t string_bytes = 0;
  uint32_t xattr_count = 0;
  PathSet dirs;
  std::vector<std::pair<std::string, int64_t>> parents;  // first seen, with that node's mtime
};

Status CountPart(const NodeSource& src, size_t part, PartCensus* c) {
  const Status too_large = Status::InvalidArgument("table: namespace too large");
  PathSet seen;  // parents: few (files are never held here)
  bool first = true;
  std::string_view last_parent;  // siblings come together: one lookup per run of them
  return src.ForEachIn(part, 0, [&](const Node& nd) -> Status {
    if (!IsCanonicalPath(nd.path))
      return Status::InvalidArgument("table: non-canonical path '" + std::string(nd.path) + "'");
    if (++c->given >= kNone - 1) return too_large;
    c->string_bytes += StringBytes(nd);
    if (c->string_bytes > kMaxStrings) return too_large;
    if (!nd.Xattrs().empty()) c->xattr_count++;
    if (S_ISDIR(nd.mode)) c->dirs.emplace(nd.path);
    const std::string_view parent = ParentOf(nd.path);
    if (first || parent != last_parent) {
      first = false;
      auto [it, added] = seen.emplace(parent);
      if (added) c->parents.emplace_back(*it, nd.mtime_ns);
      last_parent = *it;  // a key: stays put
    }
    return Status::OK();
  });
}

// The census of every part (at once, on `threads`), merged in the parts' order: the same as
// one walk of the whole source.
Status Count(const NodeSource& src, const Node& root, size_t threads,
             std::vector<PartCensus>* parts, Census* c) {
  const Status too_large = Status::InvalidArgument("table: namespace too large");
  parts->assign(src.Parts(), {});
  std::vector<Status> st(parts->size());
  ParallelFor(parts->size(), threads, [&](size_t p) { st[p] = CountPart(src, p, &(*parts)[p]); });
  for (const Status& s : st) FS_RETURN_IF_ERROR(s);
  PathSet dirs;
  PathTimes parents;
  c->string_bytes = StringBytes(root);
  c->xattr_count = root.Xattrs().empty() ? 0 : 1;
  for (PartCensus& pc : *parts) {
    c->given += pc.given;
    c->string_bytes += pc.string_bytes;
    c->xattr_count += pc.xattr_count;
    if (c->given >= kNone - 1 || c->string_bytes > kMaxStrings) return too_large;
    dirs.merge(pc.dirs);
    for (auto& [path, mtime] : pc.parents) parents.emplace(std::move(path), mtime);
    pc.dirs = {};
    pc.parents = {};
  }
  // Each missing ancestor once: a walk stops at a given directory or at one already added
  // (whose own ancestors are then in too).
  for (const auto& [path, mtime] : parents)
    for (std::string_view p = path; !p.empty() && !dirs.count(p); p = ParentOf(p)) {
      if (!c->missing.emplace(p, mtime).second) break;
      c->string_bytes += p.size();
      if (c->string_bytes > kMaxStrings) return too_large;
    }
  if (uint64_t{c->given} + c->missing.size() >= kNone - 1) return too_large;
  return Status::OK();
}

// The image's layout for `n` entries and `string_bytes` of strings (the roots first).
Header Layout(uint32_t n, uint64_t string_bytes, uint32_t xattr_count, const BuildOptions& opts) {
  // Load factor 1/2, any count: 12-byte slots at 2n take 24 bytes per entry (at 1.33M entries
  // 32 MB; 8-byte slots without the tag took 21 MB, 4-byte ones at the power of two >= 2n 17).
  const uint32_t buckets =
      static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(16, 2 * uint64_t{n}), kNone - 1));
  Header h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.entry_count = n;
  h.bucket_count = buckets;
  h.buckets_off = Align8(sizeof(Header));
  h.entries_off = Align8(h.buckets_off + uint64_t{buckets} * sizeof(Bucket));
  h.children_off = h.entries_off + uint64_t{n} * sizeof(Entry);
  h.children_count = n > 0 ? n - 1 : 0;
  h.strings_off = Align8(h.children_off + h.children_count * 4);
  h.strings_size = string_bytes;
  h.local_root_off = 0;
  h.local_root_len = static_cast<uint32_t>(opts.local_root.size());
  h.cache_root_off = opts.local_root.size();
  h.cache_root_len = static_cast<uint32_t>(opts.cache_root.size());
  h.dataset_off = h.cache_root_off + h.cache_root_len;
  h.dataset_len = static_cast<uint32_t>(opts.dataset.size());
  h.tool_off = h.dataset_off + h.dataset_len;
  h.tool_len = static_cast<uint32_t>(opts.tool.size());
  h.dev = opts.dev;
  h.dataset_id = opts.dataset_id;
  h.uid = opts.uid;
  h.gid = opts.gid;
  h.xattr_count = xattr_count;
  h.xattrs_off = Align8(h.strings_off + string_bytes);
  h.total_size = h.xattrs_off + uint64_t{xattr_count} * sizeof(XattrRef);
  return h;
}

// Writes the image in place, in the second pass. Entry 0 is the root, node k of the source
// entry k + 1, the missing parents follow.
class Writer {
 public:
  Writer(const Header& h, char* base)
      : h_(h),
        base_(base),
        entries_(reinterpret_cast<Entry*>(base + h.entries_off)),
        strings_(base + h.strings_off),
        xattrs_(reinterpret_cast<XattrRef*>(base + h.xattrs_off)) {}

  // Where a walk writes: its next entry, string and extended-attribute slot, and how far it may
  // go (what the census counted for it). Walks of different parts write disjoint ranges.
  struct Cursor {
    uint32_t next = 0, end = 0;
    uint64_t str = 0, str_end = 0;
    uint32_t xattr = 0, xattr_end = 0;
    uint32_t hardlinks = 0;
    std::vector<std::pair<std::string_view, uint32_t>> dirs;  // views into the image
  };
  static Cursor Span(uint32_t next, uint32_t end, uint64_t str, uint64_t str_end, uint32_t xattr,
                     uint32_t xattr_end) {
    Cursor c;
    c.next = next, c.end = end, c.str = str, c.str_end = str_end;
    c.xattr = xattr, c.xattr_end = xattr_end;
    return c;
  }
  // The cursor of the whole image, for the strings, root and missing parents around the parts.
  Cursor& main() { return main_; }

  void PutString(Cursor& c, std::string_view v) {
    std::memcpy(strings_ + c.str, v.data(), v.size());
    c.str += v.size();
  }
  // Fails when the source gives more than it did in the first pass.
  Status Add(Cursor& c, const Node& nd) {
    if (c.next >= c.end || c.xattr + !nd.Xattrs().empty() > c.xattr_end ||
        StringBytes(nd) > c.str_end - c.str)
      return Status::Corruption("table: the nodes changed between the builder's passes");
    const uint32_t i = c.next++;
    Entry& e = entries_[i];  // zeroed with the image
    e.hash = Xxh3(nd.path);
    e.mode = nd.mode;
    e.size = nd.size;
    e.mtime_ns = nd.mtime_ns;
    e.ctime_ns = nd.ctime_ns != 0 ? nd.ctime_ns : nd.mtime_ns;
    e.flags = nd.flags;
    e.path_off = static_cast<uint32_t>(c.str);
    e.path_len = static_cast<uint32_t>(nd.path.size());
    PutString(c, nd.path);
    if (S_ISDIR(nd.mode))
      c.dirs.emplace_back(std::string_view(strings_ + e.path_off, e.path_len), i);
    if (!nd.Xattrs().empty()) {
      e.flags |= kXattrs;
      xattrs_[c.xattr++] = XattrRef{i, static_cast<uint32_t>(nd.text.size()), c.str};
      PutString(c, nd.text);
    }
    if (S_ISREG(nd.mode)) {
      // A file has no children: first_child holds its source index, child_count its frame's
      // offset in the shard copy (kRawCopy, RawCopyOffset); Link skips files.
      e.aux = nd.source_shard;
      e.first_child = nd.source_index;
      e.child_count = nd.copy_offset;
    }
    if (S_ISLNK(nd.mode) || nd.hardlink) {
      // A hard link keeps the path it names here until LinkNames points it at that entry.
      e.aux = static_cast<uint32_t>(c.str);
      e.size = nd.text.size();
      if (nd.hardlink) e.flags = kHardLink, c.hardlinks++;
      PutString(c, nd.text);
    }
    return Status::OK();
  }
  // Takes a part's directories and hard links once its walk is done (in the parts' order).
  void Join(Cursor& c) {
    for (const auto& [path, i] : c.dirs) dirs_.emplace(path, i);
    c.dirs.clear();
    hardlinks_ += c.hardlinks;
    c.hardlinks = 0;
  }

  // Parents and children (contiguous per directory, sorted by name), then the hash table;
  // fails on a duplicate path.
  Status Link() {
    const uint32_t n = h_.entry_count;
    for (uint32_t i = 1; i < n; i++) {
      Entry& e = entries_[i];
      auto it = dirs_.find(ParentOf(Path(e)));
      if (it == dirs_.end())
        return Status::InvalidArgument("table: parent of '" + std::string(Path(e)) +
                                       "' is not a directory");
      e.parent = it->second;
      entries_[e.parent].child_count++;
    }
    dirs_ = {};
    auto* children = reinterpret_cast<uint32_t*>(base_ + h_.children_off);
    for (uint32_t i = 0, next = 0; i < n; i++) {
      if (S_ISREG(entries_[i].mode)) continue;  // no children: its fields hold its source
      entries_[i].first_child = next;
      next += entries_[i].child_count;
      entries_[i].child_count = 0;
    }
    for (uint32_t i = 1; i < n; i++) {
      Entry& p = entries_[entries_[i].parent];
      children[p.first_child + p.child_count++] = i;
      if (S_ISDIR(entries_[i].mode)) p.aux++;
    }
    // Siblings share their parent's path: by path is by name. Packed trees come sorted.
    auto by_path = [&](uint32_t a, uint32_t b) { return Path(entries_[a]) < Path(entries_[b]); };
    for (uint32_t i = 0; i < n; i++) {
      const Entry& d = entries_[i];
      if (S_ISREG(d.mode) || d.child_count < 2) continue;
      uint32_t* first = children + d.first_child;
      if (!std::is_sorted(first, first + d.child_count, by_path))
        std::sort(first, first + d.child_count, by_path);
    }
    const uint32_t buckets = h_.bucket_count;
    auto* table = reinterpret_cast<Bucket*>(base_ + h_.buckets_off);
    std::memset(table, 0xff, uint64_t{buckets} * sizeof(Bucket));  // kNone
    for (uint32_t i = 0; i < n; i++) {
      const Entry& e = entries_[i];
      uint32_t b = Slot(e.hash, buckets);
      for (; table[b].entry != kNone; b = NextSlot(b, buckets)) {
        if (table[b].tag != Tag(e.hash)) continue;
        const Entry& o = entries_[table[b].entry];
        if (o.hash == e.hash && Path(o) == Path(e))
          return Status::InvalidArgument("table: duplicate path '" + std::string(Path(e)) + "'");
      }
      table[b] = Bucket{i, e.path_off, Tag(e.hash)};
    }
    return hardlinks_ == 0 ? Status::OK() : LinkNames();
  }

 private:
  std::string_view Path(const Entry& e) const { return {strings_ + e.path_off, e.path_len}; }
  // The entry of `path` in the hash table (built), or kNone.
  uint32_t Find(std::string_view path) const {
    return Probe(reinterpret_cast<const Bucket*>(base_ + h_.buckets_off), h_.bucket_count, entries_,
                 strings_, path, Xxh3(path));
  }

  // Hard links: each other name points at its file's entry and takes its inode number and
  // attributes; the file counts its names.
  Status LinkNames() {
    for (uint32_t i = 0; i < h_.entry_count; i++) {
      Entry& e = entries_[i];
      if (!(e.flags & kHardLink)) continue;
      const std::string_view target(strings_ + e.aux, e.size);
      const uint32_t t = Find(target);
      if (t == kNone || !S_ISREG(entries_[t].mode) || (entries_[t].flags & kHardLink))
        return Status::InvalidArgument("table: hard link '" + std::string(Path(e)) + "' to '" +
                                       std::string(target) + "', not a file");
      Entry& f = entries_[t];
      e.aux = t;
      e.mode = f.mode;
      e.size = f.size;
      e.mtime_ns = f.mtime_ns;
      e.ctime_ns = f.ctime_ns;
      e.first_child = kNone;
      e.child_count = 0;
      f.flags += 1u << kExtraNamesShift;
    }
    return Status::OK();
  }

  const Header& h_;
  char* base_;
  Entry* entries_;
  char* strings_;
  XattrRef* xattrs_;
  Cursor main_ = Span(0, h_.entry_count, 0, h_.strings_size, 0, h_.xattr_count);
  uint32_t hardlinks_ = 0;
  // Directories by path (views into the image), for the parents.
  std::unordered_map<std::string_view, uint32_t, PathHash> dirs_;
};

// A vector of nodes, the root ("") among them or not.
class VectorNodes : public NodeSource {
 public:
  explicit VectorNodes(const std::vector<Node>& nodes) : nodes_(nodes) {}
  Node Root() const override {
    for (const Node& nd : nodes_)
      if (nd.path.empty()) return nd;
    return NodeSource::Root();
  }
  // The root given by Root() is skipped; a second one is refused as a non-canonical path.
  Status ForEach(int, const NodeFn& fn) const override {
    bool root = false;
    for (const Node& nd : nodes_) {
      if (nd.path.empty() && !root) {
        root = true;
        continue;
      }
      FS_RETURN_IF_ERROR(fn(nd));
    }
    return Status::OK();
  }

 private:
  const std::vector<Node>& nodes_;
};

}  // namespace

Node NodeSource::Root() const { return Node{"", S_IFDIR | 0555, 0, 0, 0, {}}; }

Status BuildInto(const NodeSource& src, const BuildOptions& opts, const AllocFn& alloc) {
  const Node root = src.Root();
  if (!root.path.empty() || !S_ISDIR(root.mode))
    return Status::InvalidArgument("table: the root is not a directory");
  const size_t threads = std::max<size_t>(1, opts.threads);
  Census c;
  std::vector<PartCensus> parts;
  FS_RETURN_IF_ERROR(Count(src, root, threads, &parts, &c));
  uint64_t string_bytes =
      opts.local_root.size() + opts.cache_root.size() + opts.dataset.size() + opts.tool.size();
  string_bytes += c.string_bytes;
  if (string_bytes > kMaxStrings) return Status::InvalidArgument("table: namespace too large");
  const uint32_t n = 1 + c.given + static_cast<uint32_t>(c.missing.size());
  const Header h = Layout(n, string_bytes, c.xattr_count, opts);
  auto mem = alloc(h.total_size);
  if (!mem.ok()) return mem.status();
  std::memcpy(mem.value(), &h, sizeof h);
  Writer w(h, mem.value());
  Writer::Cursor& all = w.main();
  for (std::string_view s : {opts.local_root, opts.cache_root, opts.dataset, opts.tool})
    w.PutString(all, s);
  FS_RETURN_IF_ERROR(w.Add(all, root));
  // Each part writes where the census puts it: the image is the one walk in order would write.
  std::vector<Writer::Cursor> cur(parts.size());
  for (size_t p = 0; p < parts.size(); p++) {
    cur[p] =
        Writer::Span(all.next, all.next + parts[p].given, all.str, all.str + parts[p].string_bytes,
                     all.xattr, all.xattr + parts[p].xattr_count);
    all.next = cur[p].end;
    all.str = cur[p].str_end;
    all.xattr = cur[p].xattr_end;
  }
  std::vector<Status> st(parts.size());
  ParallelFor(parts.size(), threads, [&](size_t p) {
    st[p] = src.ForEachIn(p, 1, [&](const Node& nd) { return w.Add(cur[p], nd); });
    if (st[p].ok() && (cur[p].next != cur[p].end || cur[p].str != cur[p].str_end ||
                       cur[p].xattr != cur[p].xattr_end))
      st[p] = Status::Corruption("table: the nodes changed between the builder's passes");
  });
  for (size_t p = 0; p < parts.size(); p++) {
    FS_RETURN_IF_ERROR(st[p]);
    w.Join(cur[p]);
  }
  for (const auto& [path, mtime] : c.missing)
    FS_RETURN_IF_ERROR(w.Add(all, Node{path, S_IFDIR | 0555, 0, mtime, 0, {}}));
  w.Join(all);
  return w.Link();
}

Status BuildInto(const std::vector<Node>& nodes, const BuildOptions& opts, const AllocFn& alloc) {
  return BuildInto(VectorNodes(nodes), opts, alloc);
}

Result<std::string> Build(const std::vector<Node>& nodes, const BuildOptions& opts) {
  std::string image;
  FS_RETURN_IF_ERROR(BuildInto(nodes, opts, [&](size_t n) -> Result<char*> {
    image.assign(n, '\0');
    return image.data();
  }));
  return image;
}

FileImage::~FileImage() {
  if (map_) ::munmap(map_, len_);
}

Result<char*> FileImage::Create(const std::string& path, size_t size) {
  UniqueFD fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Status::FromErrno("table: create " + path, errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return Status::FromErrno("table: size " + path, errno);
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return Status::FromErrno("table: mmap " + path, errno);
  if (map_) ::munmap(map_, len_);
  map_ = m;
  len_ = size;
  return static_cast<char*>(m);
}

Status WriteFile(const std::string& path, std::string_view image) {
  std::string tmp = path + ".tmp";
  UniqueFD fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Status::FromErrno("table: create " + tmp, errno);
  size_t done = 0;
  while (done < image.size()) {
    ssize_t w = ::write(fd.get(), image.data() + done, image.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::unlink(tmp.c_str());
      return Status::FromErrno("table: write " + tmp, err);
    }
    done += static_cast<size_t>(w);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno("table: rename to " + path, err);
  }
  return Status::OK();
}

static_assert(sizeof(pthread_mutex_t) <= sizeof(Header::agent_lock));

AgentLock::~AgentLock() {
  if (!map_) return;
  auto* h = static_cast<Header*>(map_);
  pthread_mutex_unlock(reinterpret_cast<pthread_mutex_t*>(h->agent_lock));
  if (owned_) ::munmap(map_, len_);
}

Status AgentLock::Acquire(char* map, size_t len) {
  if (!map || len < sizeof(Header)) return Status::Corruption("table: truncated image");
  map_ = map;
  len_ = len;
  return Lock();
}

Status AgentLock::Acquire(const std::string& table_path) {
  UniqueFD fd(::open(table_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return Status::FromErrno("table: open " + table_path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("table: stat " + table_path, errno);
  if (static_cast<size_t>(st.st_size) < sizeof(Header))
    return Status::Corruption("table: " + table_path + " is truncated");
  len_ = static_cast<size_t>(st.st_size);
  map_ = ::mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    return Status::FromErrno("table: mmap " + table_path, errno);
  }
  owned_ = true;
  return Lock();
}

Status AgentLock::Lock() {
  auto* m = reinterpret_cast<pthread_mutex_t*>(static_cast<Header*>(map_)->agent_lock);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  if (rc == 0) rc = pthread_mutex_lock(m);
  if (rc != 0) return Status::FromErrno("table: agent lock", rc);
  return Status::OK();
}

void AgentLock::MarkLocal(uint32_t index) {
  const auto* h = static_cast<const Header*>(map_);
  if (!map_ || index >= h->entry_count ||
      h->entries_off + (uint64_t{index} + 1) * sizeof(Entry) > len_)
    return;
  auto* e = reinterpret_cast<Entry*>(static_cast<char*>(map_) + h->entries_off) + index;
  __atomic_fetch_or(&e->flags, uint32_t{kLocal}, __ATOMIC_RELEASE);
}

}  // namespace fanstore::table
