// UniqueFD: RAII owner of a file descriptor. ScopeExit: run a callable at scope end.
#pragma once

#include <unistd.h>

#include <utility>

namespace fanstore {

// Owns a descriptor and closes it with Close()(fd). The interceptor instantiates it with libc's
// own close (its exported close is a wrapper); everything else uses UniqueFD.
template <typename Close>
class BasicUniqueFD {
 public:
  BasicUniqueFD() = default;
  explicit BasicUniqueFD(int fd) noexcept : fd_(fd) {}
  BasicUniqueFD(BasicUniqueFD&& o) noexcept : fd_(o.Release()) {}
  BasicUniqueFD& operator=(BasicUniqueFD&& o) noexcept {
    if (this != &o) Reset(o.Release());
    return *this;
  }
  BasicUniqueFD(const BasicUniqueFD&) = delete;
  BasicUniqueFD& operator=(const BasicUniqueFD&) = delete;
  ~BasicUniqueFD() { Reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int Release() noexcept { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) noexcept {
    if (fd_ >= 0) Close()(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct PosixClose {
  void operator()(int fd) const noexcept { ::close(fd); }
};
using UniqueFD = BasicUniqueFD<PosixClose>;

template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() {
    if (armed_) f_();
  }
  void Dismiss() { armed_ = false; }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace fanstore
