// A job's output directory drained to the parallel file system (see drainer.h).
#include "output/drainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "common/hash.h"
#include "common/io.h"
#include "output/commit.h"

namespace fanstore::output {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                             IN_DONT_FOLLOW | IN_ONLYDIR | IN_EXCL_UNLINK;

// The lowest CPU priority and the idle I/O class, for the calling thread only.
void LowerThisThreadsPriority() {
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
  constexpr int kIoprioWhoProcess = 1, kIoprioClassIdle = 3, kIoprioClassShift = 13;
  (void)::syscall(SYS_ioprio_set, kIoprioWhoProcess, tid, kIoprioClassIdle << kIoprioClassShift);
}

std::string Join(const std::string& dir, const char* name) {
  return dir.empty() ? std::string(name) : dir + "/" + name;
}

// Whether anyone has `fd`'s file open for writing: then no read lease can be had. Where leases
// are not available at all, nobody is taken to be writing (the copy's own checks still hold).
bool OpenForWriting(int fd) {
  if (::fcntl(fd, F_SETLEASE, F_RDLCK) != 0) return errno == EAGAIN;
  (void)::fcntl(fd, F_SETLEASE, F_UNLCK);
  return false;
}

// The target directory, made with its missing parents (0777 less `umask`), opened.
Result<UniqueFD> OpenTarget(const std::string& path, mode_t umask) {
  for (size_t slash = 1; slash != std::string::npos;) {
    slash = path.find('/', slash + 1);
    const std::string prefix = path.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0777 & ~umask) != 0 && errno != EEXIST)
      return Status::FromErrno("create " + prefix, errno);
  }
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);
  return fd;
}

double EpochSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Drainer::~Drainer() {
  if (watcher_.joinable() || worker_.joinable()) (void)Finish(Clock::now());
}

Status Drainer::Start(const DrainerOptions& opts) {
  opts_ = opts;
  if (opts_.activity) last_activity_ = opts_.activity();
  local_fd_.Reset(::open(opts.local.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!local_fd_.valid()) return Status::FromErrno("the output directory " + opts.local, errno);
  inotify_fd_.Reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!inotify_fd_.valid() || !wake_fd_.valid())
    return Status::FromErrno("watch " + opts.local, errno);
  AddWatch("");
  Scan("");
  watcher_ = std::thread([this] { Watch(); });
  worker_ = std::thread([this] { Work(); });
  return Status::OK();
}

void Drainer::AddWatch(const std::string& rel) {
  const std::string path = rel.empty() ? opts_.local : opts_.local + "/" + rel;
  const int wd = ::inotify_add_watch(inotify_fd_.get(), path.c_str(), kEvents);
  if (wd >= 0) watches_[wd] = rel;
}

// Every regular file below `rel` (what was there before its watch), watched directories first.
void Drainer::Scan(const std::string& rel) {
  UniqueFD dfd(rel.empty() ? ::fcntl(local_fd_.get(), F_DUPFD_CLOEXEC, 0)
                           : ::openat(local_fd_.get(), rel.c_str(),
                                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  DIR* d = dfd.valid() ? ::fdopendir(dfd.get()) : nullptr;
  if (d == nullptr) return;
  dfd.Release();
  ::rewinddir(d);
  std::vector<std::pair<std::string, bool>> found;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (e->d_type == DT_DIR || e->d_type == DT_REG)
      found.emplace_back(e->d_name, e->d_type == DT_DIR);
  }
  ::closedir(d);
  for (const auto& [name, is_dir] : found) {
    const std::string child = Join(rel, name.c_str());
    if (is_dir) {
      AddWatch(child);
      Scan(child);
    } else {
      Enqueue(child, 0);
    }
  }
}

void Drainer::Enqueue(const std::string& rel, int delay_ms) {
  std::lock_guard<std::mutex> l(mu_);
  Pending& p = pending_[rel];
  p.due = Clock::now() + std::chrono::milliseconds(finishing_ ? 0 : delay_ms);
  cv_.notify_all();
}

void Drainer::Watch() {
  alignas(struct inotify_event) char buf[64 * 1024];
  while (!stop_) {
    struct pollfd fds[2] = {{inotify_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    const ssize_t n = ::read(inotify_fd_.get(), buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof *ev + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {  // events were lost: look at everything again
        Scan("");
        continue;
      }
      auto dir = watches_.find(ev->wd);
      if (dir == watches_.end()) continue;
      if (ev->mask & IN_IGNORED) {
        watches_.erase(dir);
        continue;
      }
      if (ev->len == 0) continue;
      const std::string rel = Join(dir->second, ev->name);
      if ((ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
        AddWatch(rel);
        Scan(rel);
      } else if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
        Enqueue(rel, opts_.settle_ms);
      } else if (ev->mask & IN_MOVED_FROM) {
        std::lock_guard<std::mutex> l(mu_);
        pending_.erase(rel);  // renamed away before it drained: its new name drains
      }
    }
  }
}

void Drainer::Work() {
  LowerThisThreadsPriority();
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    auto next =
        std::min_element(pending_.begin(), pending_.end(),
                         [](const auto& a, const auto& b) { return a.second.due < b.second.due; });
    if (next == pending_.end()) {
      cv_.wait(l);
      continue;
    }
    if (next->second.due > Clock::now()) {
      cv_.wait_until(l, next->second.due);
      continue;
    }
    const std::string rel = next->first;
    Pending p = next->second;
    pending_.erase(next);
    busy_ = true;
    in_flight_ = rel;
    l.unlock();
    std::string error;
    const bool finished = Drain(rel, &error);
    l.lock();
    busy_ = false;
    in_flight_.clear();
    if (stop_ && !finished) pending_.emplace(rel, Pending{p.due, p.backoff_ms, error});
    if (!finished && !stop_ && pending_.count(rel) == 0) {
      p.backoff_ms = std::min(std::max(p.backoff_ms * 2, opts_.retry_ms), opts_.retry_max_ms);
      p.due = Clock::now() + std::chrono::milliseconds(p.backoff_ms);
      p.error = error;
      pending_[rel] = p;
      stats_.retries++;
      stats_.last_error = rel + ": " + error;
    }
    cv_.notify_all();
  }
}

void Drainer::Yield(Clock::duration piece) {
  if (!opts_.activity) return;
  const uint64_t now = opts_.activity();
  if (now == last_activity_) return;  // the job is not reading: full speed
  last_activity_ = now;
  const auto pause =
      std::min<Clock::duration>(piece * opts_.yield_factor, std::chrono::milliseconds(100));
  std::unique_lock<std::mutex> l(mu_);
  if (finishing_) return;
  cv_.wait_for(l, pause, [this] { return stop_.load() || finishing_; });
  stats_.yielded_seconds += std::chrono::duration<double>(pause).count();
}

bool Drainer::Drain(const std::string& rel, std::string* error) {
  UniqueFD src(::openat(local_fd_.get(), rel.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!src.valid() || ::fstat(src.get(), &st) != 0 || !S_ISREG(st.st_mode)) return true;  // gone
  if (OpenForWriting(src.get())) {  // its last close drains it; at the end, it is reported
    std::lock_guard<std::mutex> l(mu_);
    if (!finishing_) return true;
    *error = "still open for writing at the job's end";
    return false;
  }
  const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  std::string as;     // the name it drained to before, when not its own
  bool ours = false;  // it drained before: its name is this node's to replace
  {
    std::lock_guard<std::mutex> l(mu_);
    auto d = done_.find(rel);
    if (d != done_.end() && d->second.size == static_cast<uint64_t>(st.st_size) &&
        d->second.mtime_ns == mtime)
      return true;  // unchanged since it drained
    if (d != done_.end()) as = d->second.as, ours = true;
  }
  if (Status t = EnsureTarget(); !t.ok()) return *error = t.message(), false;
  const auto t0 = Clock::now();
  CommitRequest req{local_fd_.get(),
                    target_fd_.get(),
                    rel,
                    as.empty() ? rel : as,
                    opts_.umask,
                    ours,
                    &stop_,
                    [this](Clock::duration piece) { Yield(piece); }};
  auto c = CommitFile(req);
  if (c.ok() && c->name_taken) {  // another node's: ours goes beside it
    req.as = rel + ".node-" + opts_.node;
    req.replace = true;
    c = CommitFile(req);
  }
  if (!c.ok()) {
    if (c.status().code() == Status::Code::kAborted && !stop_) {
      Enqueue(rel, opts_.settle_ms);  // rewritten meanwhile: its next version drains
      return true;
    }
    *error = c.status().message();
    if (c.status().code() == Status::Code::kNotFound) return true;  // removed meanwhile
    return false;
  }
  std::lock_guard<std::mutex> l(mu_);
  done_[rel] = Done{c->size, c->xxh3, c->mtime_ns, req.as == rel ? "" : req.as, EpochSeconds()};
  stats_.files_drained++;
  stats_.bytes_drained += c->size;
  copy_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  return true;
}

// Made and opened at the first file (or the manifest): an unreachable one is tried again then.
Status Drainer::EnsureTarget() {
  if (target_fd_.valid()) return Status::OK();
  auto t = OpenTarget(opts_.target, opts_.umask);
  if (!t.ok()) return t.status();
  target_fd_ = std::move(t.value());
  return Status::OK();
}

DrainStats Drainer::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  DrainStats s = stats_;
  s.files_pending = pending_.size();
  s.files_failed = 0;
  s.bytes_pending = 0;
  for (const auto& [rel, p] : pending_) {
    s.files_failed += !p.error.empty();
    struct stat st;
    if (::fstatat(local_fd_.get(), rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      s.bytes_pending += static_cast<uint64_t>(st.st_size);
  }
  s.rate_bytes_per_s = copy_seconds_ > 0 ? static_cast<double>(s.bytes_drained) / copy_seconds_ : 0;
  return s;
}

}  // namespace fanstore::output

namespace fanstore::output {

DrainReport Drainer::Finish(std::chrono::steady_clock::time_point deadline) {
  {
    // First: from now on a file still open for writing is reported, not left to its close
    // (which the last look below would otherwise race with).
    std::lock_guard<std::mutex> l(mu_);
    finishing_ = true;
  }
  if (watcher_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
    watcher_.join();
    Scan("");  // a last look: anything whose event was lost or had not settled
  }
  std::unique_lock<std::mutex> l(mu_);
  for (auto& [rel, p] : pending_) p.due = std::min(p.due, Clock::now());
  cv_.notify_all();
  // Until nothing is pending and the worker is idle (it erases before it works and notifies
  // after), or the deadline.
  auto idle = [&] { return pending_.empty() && !busy_; };
  cv_.wait_until(l, deadline, idle);
  stop_ = true;  // also cancels a copy under way
  cv_.notify_all();
  l.unlock();
  if (worker_.joinable()) worker_.join();
  l.lock();
  DrainReport r;
  r.files_drained = stats_.files_drained;
  r.bytes_drained = stats_.bytes_drained;
  for (const auto& [rel, p] : pending_)
    r.not_drained[rel] = p.error.empty() ? "not reached before the deadline" : p.error;
  if (!in_flight_.empty()) r.not_drained[in_flight_] = "still being copied at the deadline";
  l.unlock();
  Status m = WriteManifest(r);
  if (!m.ok()) r.manifest_error = m.message();
  return r;
}

}  // namespace fanstore::output

namespace fanstore::output {
namespace {

// A lock on the manifest among the job's nodes, which all write to it: a directory, whose
// creation is atomic on every file system, NFS included. One left by a node that died is taken
// over after two minutes. Only another node's lock is waited for, up to 10 s: a directory that
// refuses the lock (not writable, full) fails at once, with why.
class ManifestLock {
 public:
  explicit ManifestLock(int dir) : dir_(dir) {
    static_assert(200 * 50 < kFinishSlackMs, "the lock's wait must fit in the slack");
    for (int i = 0; i < 200; i++) {
      if (::mkdirat(dir_, kName, 0700) == 0) {
        held_ = true;
        return;
      }
      if (errno != EEXIST) {
        error_ = errno;
        return;
      }
      struct stat st;
      if (::fstatat(dir_, kName, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          std::time(nullptr) - st.st_mtime > 120)
        ::unlinkat(dir_, kName, AT_REMOVEDIR);
      ::usleep(50000);
    }
  }
  ~ManifestLock() {
    if (held_) ::unlinkat(dir_, kName, AT_REMOVEDIR);
  }
  bool held() const { return held_; }
  int error() const { return error_; }

 private:
  static constexpr char kName[] = ".fanstore-output.lock";
  int dir_;
  bool held_ = false;
  int error_ = 0;
};

}  // namespace

Status Drainer::WriteManifest(const DrainReport& report) {
  FS_RETURN_IF_ERROR(EnsureTarget());
  ManifestLock lock(target_fd_.get());
  if (lock.error() != 0)
    return Status::FromErrno("the manifest's lock in " + opts_.target, lock.error());
  if (!lock.held()) return Status::Timeout("the manifest's lock in " + opts_.target);
  const std::string path = opts_.target + "/" + kManifestName;
  // Another node's entries are never dropped: a manifest that cannot be read, or is not one
  // FanStore wrote, is left alone and said so.
  nlohmann::json m = {{"version", 1}, {"files", nlohmann::json::object()}};
  if (auto old = ReadSmallFile(path, 256 << 20); old.ok()) {
    m = nlohmann::json::parse(old.value(), nullptr, /*allow_exceptions=*/false);
    if (!m.is_object() || !m.contains("files") || !m["files"].is_object())
      return Status::Corruption(path + " is not a manifest FanStore wrote; left as it is");
  } else if (old.status().code() != Status::Code::kNotFound) {
    return old.status();
  }
  if (!m.contains("not_drained") || !m["not_drained"].is_object())
    m["not_drained"] = nlohmann::json::object();
  // This node's entries are replaced by what it knows now.
  for (const char* part : {"files", "not_drained"})
    for (auto it = m[part].begin(); it != m[part].end();)
      it = it->is_object() && it->value("node", "") == opts_.node ? m[part].erase(it) : ++it;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [rel, d] : done_)
      m["files"][d.as.empty() ? rel : d.as] = {{"source", rel},          {"node", opts_.node},
                                               {"size", d.size},         {"xxh3", HashHex(d.xxh3)},
                                               {"mtime_ns", d.mtime_ns}, {"committed_at", d.at}};
  }
  for (const auto& [rel, why] : report.not_drained)
    m["not_drained"][rel] = {{"node", opts_.node}, {"why", why}};
  const std::string text = m.dump(1) + "\n";
  const std::string tmp = std::string(kManifestName) + ".tmp-" + opts_.node;
  UniqueFD fd(::openat(target_fd_.get(), tmp.c_str(),
                       O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666 & ~opts_.umask));
  if (!fd.valid()) return Status::FromErrno("create " + path, errno);
  FS_RETURN_IF_ERROR(WriteFull(fd.get(), text.data(), text.size(), path));
  if (::fsync(fd.get()) != 0) return Status::FromErrno("fsync " + path, errno);
  if (::renameat(target_fd_.get(), tmp.c_str(), target_fd_.get(), kManifestName) != 0)
    return Status::FromErrno("rename " + path, errno);
  (void)::fsync(target_fd_.get());
  return Status::OK();
}

}  // namespace fanstore::output
