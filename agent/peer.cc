// The peer service's shared parts: socket helpers (peer_io.h), MUNGE credentials and the
// listen address. The service is in peer_server.cc, its client in peer_client.cc.
#include "agent/peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <munge.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "agent/peer_io.h"
#include "agent/peer_wire.h"
#include "common/env.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace peer_io {

int MsLeft(Clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

bool WaitFor(int fd, short events) {
  struct pollfd p = {fd, events, 0};
  int r;
  while ((r = ::poll(&p, 1, kIoTimeoutMs)) < 0 && errno == EINTR) {
  }
  return r == 1;
}

bool SendIov(int fd, struct iovec* iov, int n, int flags) {
  while (n > 0) {
    struct msghdr m = {};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL | flags);
    if (w < 0) {
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(fd, POLLOUT)) continue;
      return false;
    }
    size_t left = static_cast<size_t>(w);
    for (; n > 0 && left >= iov->iov_len; n--, iov++) left -= iov->iov_len;
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

bool SendAll(int fd, const void* buf, size_t len, int flags) {
  struct iovec v = {const_cast<void*>(buf), len};
  return SendIov(fd, &v, 1, flags);
}

bool RecvAll(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  while (len) {
    ssize_t r = ::recv(fd, p, len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    len -= static_cast<size_t>(r);
  }
  return true;
}

std::string FormatEndpoint(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
}

std::string SocketEndpoint(int fd, bool peer) {
  struct sockaddr_in sa = {};
  socklen_t len = sizeof sa;
  int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len)
               : ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return r == 0 && sa.sin_family == AF_INET ? FormatEndpoint(sa) : "?";
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void SetBlockingWithTimeouts(int fd) {
  ::fcntl(fd, F_SETFL, 0);
  struct timeval tv = {kIoTimeoutMs / 1000, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  SetNoDelay(fd);
}

std::string Rank(uint32_t r) { return "peer " + std::to_string(r); }

RecvBuffer::Storage& RecvBuffer::ThreadStorage() {
  thread_local Storage storage;
  return storage;
}

RecvBuffer::RecvBuffer(int fd) : fd_(fd) {
  Storage& mine = ThreadStorage();
  buf_ = mine.in_use ? &own_ : &mine;
  buf_->in_use = true;
}

RecvBuffer::~RecvBuffer() { buf_->in_use = false; }

const char* RecvBuffer::Take(size_t n) {
  if (end_ - pos_ < n) {
    // Move what is left to the front, make room for n, and receive at least the rest.
    if (end_ > pos_) std::memmove(buf_->data.get(), buf_->data.get() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
    if (buf_->size < std::max(n, kMin)) {
      std::unique_ptr<char[]> bigger(new char[std::max(n, kMin)]);  // not zero-filled
      if (end_ > 0) std::memcpy(bigger.get(), buf_->data.get(), end_);
      buf_->data = std::move(bigger);
      buf_->size = std::max(n, kMin);
    }
    while (end_ < n) {
      ssize_t r = ::recv(fd_, buf_->data.get() + end_, buf_->size - end_, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return nullptr;
      end_ += static_cast<size_t>(r);
    }
  }
  const char* p = buf_->data.get() + pos_;
  pos_ += n;
  return p;
}

}  // namespace peer_io

Result<std::string> MungeCredential(const std::string& payload) {
  munge_ctx_t ctx = munge_ctx_create();
  if (!ctx) return Status::IOError("munge: out of memory");
  // Only the job's user (and root) can decode it: another user who gets hold of it learns
  // nothing, the session key's half in it included.
  munge_ctx_set(ctx, MUNGE_OPT_UID_RESTRICTION, ::getuid());
  char* cred = nullptr;
  munge_err_t e = munge_encode(&cred, ctx, payload.data(), static_cast<int>(payload.size()));
  munge_ctx_destroy(ctx);
  if (e != EMUNGE_SUCCESS) return Status::Permission(std::string("munge: ") + munge_strerror(e));
  std::string out(cred);
  std::free(cred);
  return out;
}

Result<MungeDecoded> MungeVerify(const std::string& cred) {
  MungeDecoded d;
  gid_t gid;
  void* buf = nullptr;
  int len = 0;
  munge_err_t e = munge_decode(cred.c_str(), nullptr, &buf, &len, &d.uid, &gid);
  if (buf) {
    if (e == EMUNGE_SUCCESS)
      d.payload.assign(static_cast<const char*>(buf), static_cast<size_t>(len));
    std::free(buf);
  }
  if (e != EMUNGE_SUCCESS) return Status::Permission(std::string("munge: ") + munge_strerror(e));
  return d;
}

Result<std::string> PeerListenAddress(const std::string& want) {
  struct in_addr a;
  std::string first, loop;
  struct ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      if (!want.empty() && want == i->ifa_name) {
        ::freeifaddrs(ifs);
        return std::string(buf);
      }
      std::string& slot = i->ifa_flags & IFF_LOOPBACK ? loop : first;
      if (slot.empty()) slot = buf;
    }
    ::freeifaddrs(ifs);
  }
  if (!want.empty()) {
    if (::inet_pton(AF_INET, want.c_str(), &a) == 1) return want;
    return Status::InvalidArgument("peer address '" + want +
                                   "' is neither an IPv4 address nor an interface of this node");
  }
  // The interface the job uses: the one the kernel routes to the launch node through.
  const char* launch = std::getenv(env::kSlurmLaunchNodeIpaddr);
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9);
  if (launch && ::inet_pton(AF_INET, launch, &sa.sin_addr) == 1) {
    UniqueFD u(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in local = {};
    socklen_t len = sizeof local;
    if (u.valid() && ::connect(u.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
        ::getsockname(u.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
      return std::string(buf);
    }
  }
  if (!first.empty()) return first;
  return loop.empty() ? std::string("127.0.0.1") : loop;
}

// --- server ----------------------------------------------------------------------------------

}  // namespace fanstore::agent
