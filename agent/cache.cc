// FileCache.
#include "agent/cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "common/table.h"
#include "common/unique_fd.h"
#include "stagein/io.h"

namespace fanstore::agent {

void FileCache::Init(std::string dir, uint64_t capacity) {
  dir_ = std::move(dir);
  capacity_ = capacity;
}

std::string FileCache::PathOf(uint64_t key) const {
  char name[16];
  table::CacheName(key, name);
  return dir_ + "/" + std::string(name, sizeof name);
}

int FileCache::Open(uint64_t key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = slots_.find(key);
  if (it == slots_.end()) return -1;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return ::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

void FileCache::EvictLocked(uint64_t need) {
  while (!lru_.empty() && used_ + need > capacity_) {
    uint64_t victim = lru_.back();
    lru_.pop_back();
    auto it = slots_.find(victim);
    used_ -= it->second.bytes;
    slots_.erase(it);
    ::unlink(PathOf(victim).c_str());
    evictions_++;
  }
}

uint64_t FileCache::free_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return capacity_ > used_ ? capacity_ - used_ : 0;
}

Result<int> FileCache::Put(uint64_t key, std::string_view data, bool evict, bool want_fd) {
  if (data.size() > capacity_) return Status::NoSpace("larger than the cache");
  const std::string path = PathOf(key);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (slots_.count(key)) {
      lru_.splice(lru_.begin(), lru_, slots_[key].pos);
      if (!want_fd) return -1;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return Status::FromErrno("cache open " + path, errno);
      return fd;
    }
    if (!evict && used_ + data.size() > capacity_) return Status::NoSpace("cache full");
    EvictLocked(data.size());
    used_ += data.size();  // reserved while writing
  }
  auto undo = [&](Status s) -> Result<int> {
    std::lock_guard<std::mutex> l(mu_);
    used_ -= data.size();
    return s;
  };
  // An unnamed file (O_TMPFILE), linked under its name once complete: clients, which open
  // cache files by name, never see a partial file, and two writers of one key cannot collide.
  // Where the file system has no O_TMPFILE, a uniquely named file renamed into place.
  std::string tmp;
  UniqueFD w(::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0400));
  if (!w.valid() && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    tmp = path + "." + std::to_string(tmp_seq_.fetch_add(1)) + ".tmp";
    w.Reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400));
  }
  if (!w.valid()) return undo(Status::FromErrno("cache create in " + dir_, errno));
  auto fail = [&](Status s) {
    if (!tmp.empty()) ::unlink(tmp.c_str());
    return undo(s);
  };
  Status s = WriteFull(w.get(), data.data(), data.size(), path);
  if (!s.ok()) return fail(s);
  char self[64];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", w.get());
  int rc = tmp.empty() ? ::linkat(AT_FDCWD, self, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW)
                       : ::rename(tmp.c_str(), path.c_str());
  const bool raced = rc != 0 && errno == EEXIST;  // another writer linked the same bytes first
  if (rc != 0 && !raced) return fail(Status::FromErrno("cache link " + path, errno));
  {
    std::lock_guard<std::mutex> l(mu_);
    if (raced || slots_.count(key)) {
      used_ -= data.size();
    } else {
      lru_.push_front(key);
      slots_[key] = Slot{lru_.begin(), data.size()};
    }
  }
  if (!want_fd) return -1;
  // A read-only descriptor of the file just written, whatever happens to the name meanwhile.
  int fd = ::open(self, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("cache reopen " + path, errno);
  return fd;
}

uint64_t FileCache::used() const {
  std::lock_guard<std::mutex> l(mu_);
  return used_;
}

uint64_t FileCache::evictions() const {
  std::lock_guard<std::mutex> l(mu_);
  return evictions_;
}

}  // namespace fanstore::agent
