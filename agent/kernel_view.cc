#define FUSE_USE_VERSION 34
#include "agent/kernel_view.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "common/xattrs.h"

namespace fanstore::agent {
namespace {

// Nothing in the dataset ever changes while it is mounted.
constexpr double kForever = 365.0 * 24 * 3600;

// /dev/fuse's device number (Documentation/admin-guide/devices.txt).
constexpr unsigned kFuseMajor = 10, kFuseMinor = 229;

// The descriptors of the files a mount's READs came for last (no_open), shared by its threads:
// a file is read in requests of at most 128 KiB, and a file fetched from a peer that the cache
// does not keep would be fetched again for each. Dropped when the mount has been idle for a
// second (Mount::Loop), so that no file stays held, on disk or in memory, after its reads.
class FileCache {
 public:
  static constexpr size_t kFiles = 16;

  std::shared_ptr<UniqueFD> Find(fuse_ino_t ino) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = files_.begin(); it != files_.end(); ++it)
      if (it->first == ino) {
        files_.splice(files_.begin(), files_, it);  // the most recent first
        return it->second;
      }
    return nullptr;
  }
  void Put(fuse_ino_t ino, std::shared_ptr<UniqueFD> fd) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& f : files_)
      if (f.first == ino) return;  // another thread opened it meanwhile
    files_.emplace_front(ino, std::move(fd));
    if (files_.size() > kFiles) files_.pop_back();  // a READ in flight keeps its own reference
  }
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    files_.clear();
  }

 private:
  std::mutex mu_;
  std::list<std::pair<fuse_ino_t, std::shared_ptr<UniqueFD>>> files_;
};

struct Context {
  const table::TableView* table;
  KernelView::OpenFn* open;
  // The descriptors handed to the kernel as file handles: closed on RELEASE, and whatever is
  // left when the mount ends (RELEASEs still queued when a namespace dies are never read).
  std::mutex* fds_mu;
  std::unordered_set<int>* fds;
  // The kernel opens files without asking (FUSE_CAP_NO_OPEN_SUPPORT, Linux 4.19): no OPEN or
  // RELEASE per file, so a file whose pages the kernel holds is read without the agent; each
  // READ then names only the node, and is answered from `files`. Set by the INIT request,
  // before any other, on whichever thread reads it.
  std::atomic<bool>* no_open;
  FileCache* files;
};

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

// The mount lets every process of the task's namespace in (allow_other: Slurm enters a working
// directory inside it with the task's mixed ids, which FUSE's own check refuses), and the mode
// bits are the kernel's (default_permissions). What reaches the agent is answered only for the
// job user and root, as a mount of the job user's own would be (another id gets EACCES; what
// the kernel has cached it may still stat, and, opens being the kernel's, read, as mode bits
// allow). Replies EACCES when refused.
bool Refused(fuse_req_t req) {
  const uid_t uid = fuse_req_ctx(req)->uid;
  if (uid == 0 || uid == Ctx(req).table->header().uid) return false;
  fuse_reply_err(req, EACCES);
  return true;
}

// The table entry of a node id, or nullptr for one the kernel cannot have been given.
const table::Entry* EntryOf(fuse_req_t req, fuse_ino_t ino) {
  const table::TableView& t = *Ctx(req).table;
  if (ino == 0 || ino > t.size()) return nullptr;
  return &t.at(static_cast<uint32_t>(ino - 1));
}

fuse_ino_t NodeOf(const table::TableView& t, const table::Entry& e) { return t.IndexOf(e) + 1; }

// A name's entry for the kernel, as LOOKUP and READDIRPLUS give it: its node (every name of a
// file is one node), attributes and timeouts; `e` null for a name that is not there.
struct fuse_entry_param EntryParam(const table::TableView& t, const table::Entry* e) {
  struct fuse_entry_param p;
  std::memset(&p, 0, sizeof p);
  p.entry_timeout = kForever;  // also for a name that is not there: it never will be
  if (e) {
    const table::Entry& node = t.Target(*e);
    p.ino = NodeOf(t, node);
    p.attr_timeout = kForever;
    t.FillStat(node, &p.attr);
  }
  return p;
}

void ReplyEntry(fuse_req_t req, const table::Entry* e) {
  const struct fuse_entry_param p = EntryParam(*Ctx(req).table, e);
  fuse_reply_entry(req, &p);
}

void Init(void* userdata, struct fuse_conn_info* conn) {
  // Requests are read from a non-blocking descriptor by several threads (Mount::Loop); the
  // splice path would read it differently.
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // Every part of a listing as READDIRPLUS: with libfuse's default (READDIRPLUS_AUTO) the kernel
  // asks for entries only in a listing's first reply, about 190 names of a 32 KiB getdents.
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  static_cast<Context*>(userdata)->no_open->store((conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0);
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (Refused(req)) return;
  const table::TableView& t = *Ctx(req).table;
  const table::Entry* dir = EntryOf(req, parent);
  if (!dir) return (void)fuse_reply_err(req, ENOENT);
  if (!table::IsDir(*dir)) return (void)fuse_reply_err(req, ENOTDIR);
  const size_t len = std::strlen(name);
  if (len > NAME_MAX) return (void)fuse_reply_err(req, ENAMETOOLONG);
  std::string rel(t.Path(*dir));
  if (!rel.empty()) rel += '/';
  rel.append(name, len);
  ReplyEntry(req, t.Lookup(rel));
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  if (Refused(req)) return;
  const table::Entry* e = EntryOf(req, ino);
  if (!e) return (void)fuse_reply_err(req, ENOENT);
  struct stat st;
  Ctx(req).table->FillStat(*e, &st);
  fuse_reply_attr(req, &st, kForever);
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  if (Refused(req)) return;
  const table::Entry* e = EntryOf(req, ino);
  if (!e || !table::IsLink(*e)) return (void)fuse_reply_err(req, EINVAL);
  fuse_reply_readlink(req, std::string(Ctx(req).table->LinkTarget(*e)).c_str());
}

// The regular file's real descriptor from Agent::Open (the staged file, unpacked on demand, or
// fetched), or -errno.
int OpenEntry(const Context& c, const table::Entry& e) {
  Reply r = (*c.open)(std::string(c.table->Path(e)));
  if (r.status != 0 || r.fd < 0) return -(r.status ? r.status : EIO);
  return r.fd;
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if (Refused(req)) return;
  const table::Entry* e = EntryOf(req, ino);
  if (!e) return (void)fuse_reply_err(req, ENOENT);
  if (table::IsDir(*e)) return (void)fuse_reply_err(req, EISDIR);
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
    return (void)fuse_reply_err(req, EROFS);
  const Context& c = Ctx(req);
  // Success, and the kernel's from now on (the mount is read-only, so the kernel refuses a
  // write itself; it keeps every file's pages, as keep_cache does).
  if (c.no_open->load()) return (void)fuse_reply_err(req, ENOSYS);
  const int fd = OpenEntry(c, *e);
  if (fd < 0) return (void)fuse_reply_err(req, -fd);
  fi->fh = static_cast<uint64_t>(fd);
  fi->keep_cache = 1;  // the bytes never change: pages cached by an earlier open stay valid
  fi->noflush = 1;
  {
    std::lock_guard<std::mutex> l(*c.fds_mu);
    c.fds->insert(fd);
  }
  if (fuse_reply_open(req, fi) != 0) {  // the open was interrupted
    std::lock_guard<std::mutex> l(*c.fds_mu);
    c.fds->erase(fd);
    ::close(fd);
  }
}

// A READ without an OPEN (no_open): the node's descriptor (OpenEntry), through the mount's
// FileCache; nullptr and *err if none.
std::shared_ptr<UniqueFD> NodeFile(fuse_req_t req, fuse_ino_t ino, int* err) {
  const Context& c = Ctx(req);
  if (auto fd = c.files->Find(ino)) return fd;
  const table::Entry* e = EntryOf(req, ino);
  const int opened = e && table::IsReg(*e) ? OpenEntry(c, *e) : -EINVAL;
  if (opened < 0) {
    *err = -opened;
    return nullptr;
  }
  auto fd = std::make_shared<UniqueFD>(opened);
  c.files->Put(ino, fd);
  return fd;
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info* fi) {
  int fd = static_cast<int>(fi->fh);
  std::shared_ptr<UniqueFD> held;  // the cached descriptor, kept open until the reply is sent
  if (Ctx(req).no_open->load()) {
    if (Refused(req)) return;
    int err = 0;
    if (!(held = NodeFile(req, ino, &err))) return (void)fuse_reply_err(req, err);
    fd = held->get();
  }
  struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = fd;
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_NO_SPLICE);  // copies the bytes before it returns
}

void Release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  const Context& c = Ctx(req);
  const int fd = static_cast<int>(fi->fh);
  {
    std::lock_guard<std::mutex> l(*c.fds_mu);
    if (c.fds->erase(fd) == 0) return (void)fuse_reply_err(req, 0);  // not ours: never closed
  }
  ::close(fd);
  fuse_reply_err(req, 0);
}

// Offsets: 0 ".", 1 "..", 2 + i the directory's i-th child (sorted by name). With `plus`
// (READDIRPLUS, which the kernel sends for every part of a listing: Init), each child comes with
// its entry, so that the kernel has every name's dentry and inode from the listing: a loader
// that lists its class directories (torchvision's ImageFolder) then opens each file with no
// LOOKUP of its own.
void ListDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  if (Refused(req)) return;
  const table::TableView& t = *Ctx(req).table;
  const table::Entry* e = EntryOf(req, ino);
  if (!e || !table::IsDir(*e)) return (void)fuse_reply_err(req, ENOTDIR);
  const auto children = t.Children(*e);
  std::vector<char> buf(std::min<size_t>(size, 1 << 20));
  size_t used = 0;
  for (uint64_t i = off < 0 ? 0 : static_cast<uint64_t>(off); i < 2 + children.size(); i++) {
    const table::Entry& c = i == 0 ? *e : i == 1 ? t.at(e->parent) : t.at(children[i - 2]);
    std::string name = i == 0 ? "." : i == 1 ? ".." : std::string(t.Name(c));
    // "." and ".." with node 0: the kernel links no entry for them.
    struct fuse_entry_param p = EntryParam(t, i < 2 ? nullptr : &c);
    if (i < 2) {
      p.attr.st_ino = t.Ino(c);
      p.attr.st_mode = c.mode;
    }
    char* at = buf.data() + used;
    const off_t next = static_cast<off_t>(i + 1);
    const size_t need =
        plus ? fuse_add_direntry_plus(req, at, buf.size() - used, name.c_str(), &p, next)
             : fuse_add_direntry(req, at, buf.size() - used, name.c_str(), &p.attr, next);
    if (need > buf.size() - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  ListDir(req, ino, size, off, false);
}
void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  ListDir(req, ino, size, off, true);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  if (Refused(req)) return;
  const table::TableView& t = *Ctx(req).table;
  struct statvfs s;
  std::memset(&s, 0, sizeof s);
  s.f_bsize = s.f_frsize = 4096;
  s.f_blocks = (t.header().total_size + 4095) / 4096;
  s.f_files = t.size();
  s.f_namemax = NAME_MAX;
  s.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
  fuse_reply_statfs(req, &s);
}

// The dataset's extended attributes (user.* only), from the table.
void ReplyXattr(fuse_req_t req, size_t size, ssize_t n, const std::vector<char>& buf) {
  if (n < 0) return (void)fuse_reply_err(req, static_cast<int>(-n));
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<size_t>(n));
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
}
void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (Refused(req)) return;
  const table::Entry* e = EntryOf(req, ino);
  if (!e) return (void)fuse_reply_err(req, ENOENT);
  std::vector<char> buf(std::min(size, xattrs::kMaxValue));
  const std::string_view enc = Ctx(req).table->Xattrs(*e);
  ReplyXattr(req, size, xattrs::Get(enc, name, buf.data(), buf.size()), buf);
}
void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  if (Refused(req)) return;
  const table::Entry* e = EntryOf(req, ino);
  if (!e) return (void)fuse_reply_err(req, ENOENT);
  std::vector<char> buf(std::min(size, xattrs::kMaxList));
  const std::string_view enc = Ctx(req).table->Xattrs(*e);
  ReplyXattr(req, size, xattrs::List(enc, buf.data(), buf.size()), buf);
}

const struct fuse_lowlevel_ops kOps = [] {
  struct fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = Init;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  // No opendir: libfuse answers ENOSYS, after which the kernel opens directories without a
  // request (FUSE_CAP_NO_OPENDIR_SUPPORT). The library's directory stand-ins are opened in the
  // view (local_files.cc, OpenDirStandIn), so a request per opendir would cost every listing.
  ops.readdir = ReadDir;
  ops.readdirplus = ReadDirPlus;
  ops.statfs = StatFs;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  return ops;
}();

}  // namespace

struct KernelView::Mount {
  static constexpr int kIdleMs = 1000;

  Context ctx;
  struct fuse_session* se = nullptr;
  UniqueFD stop;  // an eventfd: readable once the mount must end
  std::vector<std::thread> threads;
  std::atomic<int> running{0};
  std::mutex fds_mu;
  std::unordered_set<int> fds;
  std::atomic<bool> no_open{false};
  FileCache files;

  void Wake() {
    uint64_t one = 1;
    if (stop.valid()) (void)!::write(stop.get(), &one, sizeof one);
  }

  ~Mount() {
    Wake();
    for (std::thread& t : threads) t.join();
    for (int fd : fds) ::close(fd);
    if (se) fuse_session_destroy(se);  // closes the /dev/fuse descriptor
  }

  void Loop() {
    struct fuse_buf buf;
    std::memset(&buf, 0, sizeof buf);
    const int dev = fuse_session_fd(se);
    while (!fuse_session_exited(se)) {
      struct pollfd p[2] = {{dev, POLLIN, 0}, {stop.get(), POLLIN, 0}};
      const int ready = ::poll(p, 2, kIdleMs);
      if (ready == 0) files.Clear();  // idle: no file stays held after its reads
      if (ready <= 0) {
        if (ready == 0 || errno == EINTR) continue;
        break;
      }
      if (p[1].revents) break;
      if (p[0].revents & (POLLERR | POLLHUP)) break;  // unmounted
      const int n = fuse_session_receive_buf(se, &buf);
      if (n == -EINTR || n == -EAGAIN) continue;  // another thread took the request
      if (n <= 0) break;
      fuse_session_process_buf(se, &buf);
    }
    std::free(buf.mem);
    fuse_session_exit(se);
    Wake();  // the other threads end too: the mount is over
    running--;
  }
};

KernelView::KernelView(const table::TableView& table, OpenFn open)
    : table_(table), open_(std::move(open)) {}

KernelView::~KernelView() { Stop(); }

Status KernelView::Serve(UniqueFD dev) {
  struct stat st;
  if (!dev.valid() || ::fstat(dev.get(), &st) != 0 || !S_ISCHR(st.st_mode) ||
      major(st.st_rdev) != kFuseMajor || minor(st.st_rdev) != kFuseMinor)
    return Status::InvalidArgument("the descriptor passed for the kernel view is not /dev/fuse");
  if (::fcntl(dev.get(), F_SETFL, O_NONBLOCK) != 0) return Status::FromErrno("fcntl", errno);
  std::lock_guard<std::mutex> l(mu_);
  if (stopped_) return Status::IOError("the agent is stopping");
  Reap();
  if (mounts_.size() >= kMaxMounts)
    return Status::IOError("already serving " + std::to_string(kMaxMounts) +
                           " kernel views on this node");
  auto m = std::make_unique<Mount>();
  m->ctx = Context{&table_, &open_, &m->fds_mu, &m->fds, &m->no_open, &m->files};
  m->stop.Reset(::eventfd(0, EFD_CLOEXEC));
  if (!m->stop.valid()) return Status::FromErrno("eventfd", errno);
  char arg0[] = "fanstore-agent";
  char* argv[] = {arg0, nullptr};
  struct fuse_args args = FUSE_ARGS_INIT(1, argv);
  m->se = fuse_session_new(&args, &kOps, sizeof kOps, &m->ctx);
  fuse_opt_free_args(&args);  // the session keeps copies of what it needs
  if (!m->se) return Status::IOError("cannot start a FUSE session");
  // libfuse takes a descriptor that is already mounted as the mount point /dev/fd/N.
  const std::string where = "/dev/fd/" + std::to_string(dev.get());
  if (fuse_session_mount(m->se, where.c_str()) != 0)
    return Status::IOError("FUSE refused the descriptor for the kernel view");
  (void)dev.Release();  // the session's now
  try {
    for (int i = 0; i < kThreadsPerMount; i++) {
      m->running++;
      m->threads.emplace_back([mp = m.get()] { mp->Loop(); });
    }
  } catch (const std::system_error& e) {
    m->running--;
    return Status::IOError(std::string("no thread for the kernel view: ") + e.what());
  }
  mounts_.push_back(std::move(m));
  return Status::OK();
}

void KernelView::Reap() {
  mounts_.remove_if([](const std::unique_ptr<Mount>& m) { return m->running.load() == 0; });
}

size_t KernelView::mounts() {
  std::lock_guard<std::mutex> l(mu_);
  Reap();
  return mounts_.size();
}

void KernelView::Stop() {
  std::list<std::unique_ptr<Mount>> ending;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    ending.swap(mounts_);
  }
  ending.clear();  // each wakes its threads, joins them and closes its connection
}

}  // namespace fanstore::agent
