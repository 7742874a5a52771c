// FileCache.
#include "agent/cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "common/io.h"
#include "common/table.h"
#include "common/unique_fd.h"

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

bool FileCache::Has(uint64_t key) const {
  std::lock_guard<std::mutex> l(mu_);
  return slots_.count(key) != 0;
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

Status FileCache::Begin(uint64_t key, uint64_t size, bool evict, Pending* p) {
  if (size > capacity_) return Status::NoSpace("larger than the cache");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!evict && used_ + size > capacity_) return Status::NoSpace("cache full");
    EvictLocked(size);
    used_ += size;  // reserved while writing
  }
  p->key = key;
  p->size = size;
  p->tmp.clear();
  // An unnamed file (O_TMPFILE), linked under its name once complete: clients, which open
  // cache files by name, never see a partial file, and two writers of one key cannot collide.
  // Where the file system has no O_TMPFILE, a uniquely named file renamed into place.
  p->fd.Reset(::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0400));
  if (!p->fd.valid() && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    p->tmp = PathOf(key) + "." + std::to_string(tmp_seq_.fetch_add(1)) + ".tmp";
    p->fd.Reset(::open(p->tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400));
  }
  if (!p->fd.valid()) {
    Status s = Status::FromErrno("cache create in " + dir_, errno);
    p->tmp.clear();
    Abort(p);
    return s;
  }
  p->active = true;
  return Status::OK();
}

void FileCache::Abort(Pending* p) {
  if (!p->tmp.empty()) ::unlink(p->tmp.c_str());
  p->fd.Reset();
  p->tmp.clear();
  std::lock_guard<std::mutex> l(mu_);
  used_ -= p->size;
  p->size = 0;
  p->active = false;
}

Result<int> FileCache::Commit(Pending* p, bool want_fd) {
  const std::string path = PathOf(p->key);
  char self[64];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", p->fd.get());
  int rc = p->tmp.empty() ? ::linkat(AT_FDCWD, self, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW)
                          : ::rename(p->tmp.c_str(), path.c_str());
  const bool raced = rc != 0 && errno == EEXIST;  // another writer linked the same bytes first
  if (rc != 0 && !raced) {
    Status s = Status::FromErrno("cache link " + path, errno);
    Abort(p);
    return s;
  }
  p->tmp.clear();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (raced || slots_.count(p->key)) {
      used_ -= p->size;
    } else {
      lru_.push_front(p->key);
      slots_[p->key] = Slot{lru_.begin(), p->size};
    }
  }
  p->active = false;
  // A read-only descriptor of the file just written, whatever happens to the name meanwhile.
  int fd = want_fd ? ::open(self, O_RDONLY | O_CLOEXEC) : -1;
  const int err = errno;
  p->fd.Reset();
  if (want_fd && fd < 0) return Status::FromErrno("cache reopen " + path, err);
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
