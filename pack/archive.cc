// The archive packer (see archive.h). libarchive reads the tar formats and decompresses; members
// are collected into batches compressed on the pool, and the writer fills shards one after the
// other to the target size, in archive order. The paths named so far are an ArchiveTree
// (archive_tree.h).
#include "pack/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <locale.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "common/io.h"
#include "common/thread_pool.h"
#include "common/xattrs.h"
#include "pack/archive_tree.h"
#include "pack/core.h"

namespace fanstore::pack {
namespace {

using format::EntryType;

constexpr int kMaxNesting = 4;  // archives inside archives, deeper ones are stored as files
constexpr size_t kBatchBytes = 4u << 20, kBatchFiles = 256;
constexpr size_t kReadBlock = 1u << 20;

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

ArchivePtr NewReader() {
  ArchivePtr a(archive_read_new());
  if (a) {
    archive_read_support_filter_all(a.get());
    archive_read_support_format_tar(a.get());
    archive_read_support_format_gnutar(a.get());
  }
  return a;
}

// An archive inside an archive reads the outer one's current member, block by block as the
// outer reader holds them (no copy; each stays valid until the next call).
struct InnerSource {
  archive* outer;
  la_int64_t next = 0;
};
la_ssize_t InnerRead(archive* inner, void* client, const void** buf) {
  auto* s = static_cast<InnerSource*>(client);
  size_t size = 0;
  la_int64_t offset = 0;
  const int r = archive_read_data_block(s->outer, buf, &size, &offset);
  if (r == ARCHIVE_EOF) return 0;
  if (r < ARCHIVE_WARN) {
    archive_set_error(inner, EIO, "%s", archive_error_string(s->outer));
    return -1;
  }
  if (offset != s->next) {  // a hole: not an archive anyone wrote on purpose
    archive_set_error(inner, EINVAL, "sparse member");
    return -1;
  }
  s->next += static_cast<la_int64_t>(size);
  return static_cast<la_ssize_t>(size);
}

std::string BaseName(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

struct PendingBatch {
  std::vector<SrcEntry> files;
  std::string data;  // the files' contents back to back
};

// What the writer thread appends next, in archive order: a batch being compressed on the pool,
// or one large file spooled to disk.
struct Work {
  std::future<BatchOut> batch;
  std::unique_ptr<BigSource> big;
  SrcEntry big_entry;
};

class ArchivePacker : PackCore {
 public:
  ArchivePacker(std::string tmp, const Options& o, mode_t dir_mode)
      : PackCore(std::move(tmp), o, dir_mode),
        pool_(o.threads ? o.threads : ThreadPool::DefaultThreads()),
        writer_([this] { WriteLoop(); }) {}
  ~ArchivePacker() { (void)CloseQueue(); }

  Status Run(const std::vector<std::string>& srcs, Stats* stats);

 private:
  Status ReadTop(const std::string& src, const std::string& prefix);
  Status ReadArchive(archive* a, const std::string& label, const std::string& prefix, int depth);
  Status Member(archive* a, archive_entry* ent, const std::string& label, const std::string& prefix,
                int depth);
  // An archive inside the archive, read in place into the directory `dir`.
  Status ReadInner(archive* outer, const std::string& where, const std::string& dir,
                   int64_t mtime_ns, int depth);
  void Warn(const std::string& msg) {
    meta_.skipped++;
    if (opts_.warn) opts_.warn(msg);
  }
  void MemberAttrs(archive_entry* ent, const std::string& where, int64_t mtime, int64_t* ctime,
                   std::string* enc);
  Status AddFile(archive* a, const std::string& label, SrcEntry e);
  Status Spool(archive* a, const std::string& label, const SrcEntry& e, BigSource* src);
  // The reading thread hands work to the writer thread, which owns the open shard.
  Status Dispatch();
  Status Enqueue(Work w);
  Status CloseQueue();
  void WriteLoop();
  Status Write(Work& w);
  Status Rotate(uint64_t bytes, uint64_t files);

  ThreadPool pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool closed_ = false;
  Status writer_status_;
  std::shared_ptr<PendingBatch> cur_ = std::make_shared<PendingBatch>();
  ShardOut shard_;
  uint32_t shard_id_ = 0;
  uint64_t shard_raw_ = 0, shard_files_ = 0;
  ArchiveTree tree_;
  SourceTree meta_;     // root mode and mtime, skipped entries
  std::thread writer_;  // last: started once everything it uses exists
};

// Member names are bytes, as in a directory tree. libarchive converts pax's UTF-8 names to the
// thread's locale, and warns in the C locale; under C.UTF-8 they pass through as they are.
class Utf8Names {
 public:
  Utf8Names() : loc_(::newlocale(LC_CTYPE_MASK, "C.UTF-8", nullptr)) {
    if (loc_) old_ = ::uselocale(loc_);
  }
  ~Utf8Names() {
    if (!loc_) return;
    ::uselocale(old_);
    ::freelocale(loc_);
  }
  Utf8Names(const Utf8Names&) = delete;
  Utf8Names& operator=(const Utf8Names&) = delete;

 private:
  locale_t loc_;
  locale_t old_ = LC_GLOBAL_LOCALE;
};

Status ArchivePacker::Run(const std::vector<std::string>& srcs, Stats* stats) {
  Utf8Names utf8;
  FS_RETURN_IF_ERROR(OpenShard(&shard_, 0));
  for (const std::string& src : srcs) {
    std::string prefix;
    if (srcs.size() > 1) {
      const std::string base = BaseName(src);
      prefix = base.substr(0, base.size() - ArchiveSuffix(base));
      struct stat st;
      const int64_t mtime =
          ::stat(src.c_str(), &st) == 0
              ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec
              : 0;
      if (prefix.empty() || !format::IsSafePath(prefix))
        return Status::InvalidArgument(src + ": cannot name a directory after this archive");
      if (tree_.HasNonFile(prefix))
        return Status::InvalidArgument(src + ": another archive's members already went into " +
                                       prefix + "/; give the archives different names");
      FS_RETURN_IF_ERROR(tree_.AddDir(prefix, 0755, mtime));
    }
    FS_RETURN_IF_ERROR(ReadTop(src, prefix));
  }
  if (!cur_->files.empty()) FS_RETURN_IF_ERROR(Dispatch());
  FS_RETURN_IF_ERROR(CloseQueue());
  std::vector<SrcEntry>& nonfiles = tree_.nonfiles();
  meta_.skipped += DropEscapingLinks("", &nonfiles, opts_.warn);
  FS_RETURN_IF_ERROR(AppendNonFiles(shard_, nonfiles));
  FS_RETURN_IF_ERROR(FinishShard(shard_, shard_id_));
  uint64_t dirs = 0, links = 0;
  for (const auto& e : nonfiles) {
    dirs += e.type == EntryType::kDir;
    links += e.type == EntryType::kSymlink;
  }
  return WriteManifest(meta_, done_files_, dirs, links, stats);
}

Status ArchivePacker::ReadTop(const std::string& src, const std::string& prefix) {
  UniqueFD fd(src == "-" ? ::dup(0) : ::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("cannot read " + src, errno);
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  const std::string label = src == "-" ? "standard input" : src;
  ArchivePtr a = NewReader();
  if (!a) return Status::IOError("libarchive: out of memory");
  if (archive_read_open_fd(a.get(), fd.get(), kReadBlock) != ARCHIVE_OK)
    return Status::InvalidArgument(label + " is not a tar archive (" +
                                   archive_error_string(a.get()) + ")");
  return ReadArchive(a.get(), label, prefix, 0);
}

Status ArchivePacker::ReadInner(archive* outer, const std::string& where, const std::string& dir,
                                int64_t mtime_ns, int depth) {
  FS_RETURN_IF_ERROR(tree_.AddDir(dir, 0755, mtime_ns));
  ArchivePtr inner = NewReader();
  InnerSource src{outer};
  if (!inner) return Status::IOError("libarchive: out of memory");
  if (archive_read_open(inner.get(), &src, nullptr, InnerRead, nullptr) != ARCHIVE_OK)
    return Status::InvalidArgument(where + " is not a tar archive (" +
                                   archive_error_string(inner.get()) + ")");
  return ReadArchive(inner.get(), where, dir, depth);
}

Status ArchivePacker::ReadArchive(archive* a, const std::string& label, const std::string& prefix,
                                  int depth) {
  bool first = true;
  while (true) {
    if (Cancelled()) return Status::Aborted("interrupted");
    archive_entry* ent = nullptr;
    int r = archive_read_next_header(a, &ent);
    if (r == ARCHIVE_EOF) break;
    if (r == ARCHIVE_WARN) {
      Warn(label + ": " + archive_error_string(a));
    } else if (r != ARCHIVE_OK) {
      const char* why = archive_error_string(a);
      return Status::InvalidArgument(label + (first ? " is not a tar archive (" : ": damaged (") +
                                     (why ? why : "unknown error") + ")");
    }
    first = false;
    FS_RETURN_IF_ERROR(Member(a, ent, label, prefix, depth));
  }
  return Status::OK();
}

// A member's ctime (its mtime when the archive has none) and carried extended attributes
// (pax SCHILY.xattr records), encoded; attributes a dataset cannot hold are warned about.
void ArchivePacker::MemberAttrs(archive_entry* ent, const std::string& where, int64_t mtime,
                                int64_t* ctime, std::string* enc) {
  *ctime = archive_entry_ctime_is_set(ent)
               ? static_cast<int64_t>(archive_entry_ctime(ent)) * 1000000000 +
                     archive_entry_ctime_nsec(ent)
               : mtime;
  std::vector<std::pair<std::string, std::string>> attrs;
  archive_entry_xattr_reset(ent);
  const char* name = nullptr;
  const void* value = nullptr;
  size_t size = 0;
  while (archive_entry_xattr_next(ent, &name, &value, &size) == ARCHIVE_OK)
    if (name && xattrs::Carried(name))
      attrs.emplace_back(name, std::string(static_cast<const char*>(value), value ? size : 0));
  enc->clear();
  if (attrs.empty()) return;
  *enc = xattrs::Encode(std::move(attrs));
  std::string why;
  if (!xattrs::Valid(*enc, &why)) {
    Warn(where + ": extended attributes not stored: " + why);
    enc->clear();
  }
}

Status ArchivePacker::Member(archive* a, archive_entry* ent, const std::string& label,
                             const std::string& prefix, int depth) {
  const char* name = archive_entry_pathname(ent);
  if (!name) name = "";
  const std::string where = label + ": " + name;
  std::string rel;
  if (!MemberPath(prefix, name, &rel)) {
    Warn("skipping " + where + ": the name contains '..'");
    return Status::OK();
  }
  const mode_t type = archive_entry_filetype(ent);
  const auto mode = static_cast<uint32_t>(archive_entry_perm(ent) & 07777);
  const int64_t mtime =
      static_cast<int64_t>(archive_entry_mtime(ent)) * 1000000000 + archive_entry_mtime_nsec(ent);
  int64_t ctime = mtime;
  std::string attrs;
  if (type == AE_IFREG || type == AE_IFDIR) MemberAttrs(ent, where, mtime, &ctime, &attrs);
  if (rel.empty()) {  // "./": the root directory itself
    if (type == AE_IFDIR && prefix.empty() && depth == 0) {
      meta_.root_mode = mode;
      meta_.root_mtime_ns = mtime;
      meta_.root_ctime_ns = ctime;
      meta_.root_xattrs = std::move(attrs);
    }
    return Status::OK();
  }
  if (!format::IsSafePath(rel)) {
    Warn("skipping " + where + ": name is too long");
    return Status::OK();
  }
  if (const char* link = archive_entry_hardlink(ent)) {  // another name of an earlier file
    std::string target;
    if (!MemberPath(prefix, link, &target) || !tree_.HasFile(target)) {
      Warn("skipping " + where + ": a hard link to " + link +
           ", which is not a file earlier in the archive");
      return Status::OK();
    }
    return tree_.AddLink(rel, EntryType::kHardLink, mode, mtime, std::move(target));
  }
  if (type == AE_IFDIR) {
    FS_RETURN_IF_ERROR(tree_.AddDir(rel, mode, mtime));
    tree_.SetDirAttrs(rel, ctime, std::move(attrs));
    return Status::OK();
  }
  if (type == AE_IFLNK) {
    const char* t = archive_entry_symlink(ent);
    const std::string target = t ? t : "";
    if (target.empty() || target.size() > format::kMaxPath || target.front() == '/' ||
        !format::IsContainedLink(rel, target)) {
      Warn("skipping symlink " + where + " -> " + target + ": points outside the dataset");
      return Status::OK();
    }
    return tree_.AddLink(rel, EntryType::kSymlink, 0777, mtime, target);
  }
  if (type != AE_IFREG) {
    Warn("skipping " + where + ": not a file, directory or symlink");
    return Status::OK();
  }
  if (const size_t suffix = ArchiveSuffix(rel);
      suffix && opts_.inner_archives && rel[rel.size() - suffix - 1] != '/') {
    if (depth + 1 < kMaxNesting)
      return ReadInner(a, where, rel.substr(0, rel.size() - suffix), mtime, depth + 1);
    Warn(where + ": archive nested too deeply, stored as a file");
  }
  return AddFile(a, where,
                 {rel,
                  EntryType::kFile,
                  mode,
                  static_cast<uint64_t>(std::max<la_int64_t>(archive_entry_size(ent), 0)),
                  mtime,
                  {},
                  ctime,
                  std::move(attrs)});
}

// Reads exactly n bytes of the current member.
Status ReadMember(archive* a, const std::string& where, char* dst, uint64_t n) {
  while (n > 0) {
    la_ssize_t r = archive_read_data(a, dst, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)));
    if (r < 0) return Status::IOError(where + ": " + archive_error_string(a));
    if (r == 0) return Status::IOError(where + ": the archive ends inside this member");
    dst += r;
    n -= static_cast<uint64_t>(r);
  }
  return Status::OK();
}

Status ArchivePacker::AddFile(archive* a, const std::string& where, SrcEntry e) {
  FS_RETURN_IF_ERROR(tree_.Claim(e.rel, EntryType::kFile, e.mtime_ns));  // now a file of tree_
  if (e.size > format::kStreamAbove) {
    Work w;
    w.big = std::make_unique<BigSource>();
    FS_RETURN_IF_ERROR(Spool(a, where, e, w.big.get()));
    if (!cur_->files.empty()) FS_RETURN_IF_ERROR(Dispatch());
    w.big_entry = std::move(e);
    return Enqueue(std::move(w));
  }
  const size_t at = cur_->data.size();
  cur_->data.resize(at + e.size);
  FS_RETURN_IF_ERROR(ReadMember(a, where, cur_->data.data() + at, e.size));
  cur_->files.push_back(std::move(e));
  if (cur_->data.size() >= kBatchBytes || cur_->files.size() >= kBatchFiles) return Dispatch();
  return Status::OK();
}

// A large member goes to an unnamed file beside the shards, from which WriteBig reads it.
Status ArchivePacker::Spool(archive* a, const std::string& where, const SrcEntry& e,
                            BigSource* src) {
  src->path = where;
  src->fd = UniqueFD(::open(tmp_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!src->fd.valid()) {
    std::string name = tmp_ + "/.spool-XXXXXX";
    src->fd = UniqueFD(::mkostemp(name.data(), O_CLOEXEC));
    if (!src->fd.valid()) return Status::FromErrno("create a spool file in " + tmp_, errno);
    ::unlink(name.c_str());
  }
  for (uint64_t off = 0; off < e.size;) {
    if (Cancelled()) return Status::Aborted("interrupted");
    const size_t n = static_cast<size_t>(std::min<uint64_t>(BigSource::kPiece, e.size - off));
    FS_RETURN_IF_ERROR(ReadMember(a, where, src->in.get(), n));
    FS_RETURN_IF_ERROR(WriteFull(src->fd.get(), src->in.get(), n, tmp_));
    off += n;
  }
  return Status::OK();
}

Status ArchivePacker::Dispatch() {
  auto batch = std::move(cur_);
  cur_ = std::make_shared<PendingBatch>();
  auto done = std::make_shared<std::promise<BatchOut>>();
  Work w;
  w.batch = done->get_future();
  pool_.Submit([this, batch, done] {
    BatchOut out;
    std::string comp;
    size_t at = 0;
    for (const SrcEntry& e : batch->files) {
      CompressFile(e, std::string_view(batch->data).substr(at, e.size), &comp, &out);
      at += e.size;
    }
    done->set_value(std::move(out));
  });
  return Enqueue(std::move(w));
}

// Waits while the writer is a window behind (which bounds the memory held by read batches).
Status ArchivePacker::Enqueue(Work w) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.size() < 3 * pool_.size() || !writer_status_.ok(); });
  if (!writer_status_.ok()) return writer_status_;
  queue_.push_back(std::move(w));
  cv_.notify_all();
  return Status::OK();
}

// Lets the writer finish what is queued, and waits for it.
Status ArchivePacker::CloseQueue() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  return writer_status_;
}

void ArchivePacker::WriteLoop() {
  while (true) {
    Work w;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();
    Status st = writer_status_.ok() ? Write(w) : Status::OK();
    if (w.batch.valid()) w.batch.wait();  // the pool task must not outlive what it uses
    if (!st.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      writer_status_ = std::move(st);
      cv_.notify_all();
    }
  }
}

Status ArchivePacker::Write(Work& w) {
  if (Cancelled()) return Status::Aborted("interrupted");
  if (w.big) {
    FS_RETURN_IF_ERROR(Rotate(w.big_entry.size, 1));
    shard_raw_ += w.big_entry.size;
    shard_files_++;
    return AppendBig(shard_, *w.big, w.big_entry);
  }
  BatchOut out = w.batch.get();
  FS_RETURN_IF_ERROR(out.status);
  uint64_t bytes = 0;
  for (const auto& e : out.entries) bytes += e.size;
  FS_RETURN_IF_ERROR(Rotate(bytes, out.entries.size()));
  shard_raw_ += bytes;
  shard_files_ += out.entries.size();
  return AppendBatch(shard_, std::move(out));
}

// Starts the next shard when the open one would pass its target size or file count.
Status ArchivePacker::Rotate(uint64_t bytes, uint64_t files) {
  if (shard_files_ == 0 || (shard_raw_ + bytes <= std::max<uint64_t>(opts_.shard_size, 1) &&
                            shard_files_ + files <= std::max<uint64_t>(opts_.shard_files, 1)))
    return Status::OK();
  FS_RETURN_IF_ERROR(FinishShard(shard_, shard_id_));
  shard_raw_ = shard_files_ = 0;
  return OpenShard(&shard_, ++shard_id_);
}

}  // namespace

size_t ArchiveSuffix(const std::string& name) {
  for (const char* s : {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"}) {
    const size_t n = std::char_traits<char>::length(s);
    if (name.size() > n && name.compare(name.size() - n, n, s) == 0) return n;
  }
  return 0;
}

Status PackArchives(const std::vector<std::string>& srcs, const std::string& tmp,
                    const Options& opts, mode_t dir_mode, Stats* stats) {
  if (opts.dict)
    return Status::InvalidArgument("--dict needs a directory as the source, not an archive");
  ArchivePacker p(tmp, opts, dir_mode);
  return p.Run(srcs, stats);
}

}  // namespace fanstore::pack
