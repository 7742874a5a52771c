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

Result<int> FileCache::Put(uint64_t key, std::string_view data, bool evict) {
  if (data.size() > capacity_) return Status::NoSpace("larger than the cache");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (slots_.count(key)) {
      lru_.splice(lru_.begin(), lru_, slots_[key].pos);
      int fd = ::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return Status::FromErrno("cache open", errno);
      return fd;
    }
    if (!evict && used_ + data.size() > capacity_) return Status::NoSpace("cache full");
    EvictLocked(data.size());
    used_ += data.size();  // reserved while writing
  }
  const std::string path = PathOf(key), tmp = path + ".tmp";
  auto undo = [&](Status s) -> Result<int> {
    ::unlink(tmp.c_str());
    std::lock_guard<std::mutex> l(mu_);
    used_ -= data.size();
    return s;
  };
  UniqueFD w(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0400));
  if (!w.valid()) return undo(Status::FromErrno("cache create " + tmp, errno));
  Status s = WriteFull(w.get(), data.data(), data.size(), tmp);
  if (!s.ok()) return undo(s);
  UniqueFD r(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!r.valid() || ::rename(tmp.c_str(), path.c_str()) != 0) return undo(Status::FromErrno("cache rename " + tmp, errno));
  std::lock_guard<std::mutex> l(mu_);
  lru_.push_front(key);
  slots_[key] = Slot{lru_.begin(), data.size()};
  return r.Release();
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
