// The local protocol: framing and descriptor passing.
#include "common/proto.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/unique_fd.h"

namespace fanstore::proto {
namespace {

int ReadFull(int sock, void* buf, size_t len, int* fd) noexcept {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    struct iovec iov = {p + done, len - done};
    alignas(struct cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd) {
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof ctrl;
    }
    ssize_t r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return -ECONNRESET;
    if (fd) {
      for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          for (size_t i = 0; i < n; i++) {  // more than one: keep the first, close the rest
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
            UniqueFD passed(got);
            if (*fd < 0) *fd = passed.Release();
          }
        }
      }
    }
    done += static_cast<size_t>(r);
  }
  return 0;
}

}  // namespace

int Send(int sock, const Frame& f, const void* payload, int fd) noexcept {
  struct iovec iov[2] = {{const_cast<Frame*>(&f), sizeof f},
                         {const_cast<void*>(payload), payload ? f.len : 0}};
  alignas(struct cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = iov;
  msg.msg_iovlen = payload && f.len ? 2 : 1;
  if (fd >= 0) {
    memset(ctrl, 0, sizeof ctrl);
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  size_t total = sizeof f + (msg.msg_iovlen == 2 ? f.len : 0);
  size_t sent = 0;
  while (sent < total) {
    ssize_t w = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    sent += static_cast<size_t>(w);
    if (sent >= total) break;
    // Partial write: advance the iovecs; the descriptor went with the first byte.
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
    size_t skip = static_cast<size_t>(w);
    while (msg.msg_iovlen && skip >= msg.msg_iov[0].iov_len) {
      skip -= msg.msg_iov[0].iov_len;
      msg.msg_iov++;
      msg.msg_iovlen--;
    }
    if (msg.msg_iovlen) {
      msg.msg_iov[0].iov_base = static_cast<char*>(msg.msg_iov[0].iov_base) + skip;
      msg.msg_iov[0].iov_len -= skip;
    }
  }
  return 0;
}

int Recv(int sock, Frame* f, void* buf, size_t cap, int* fd) noexcept {
  if (fd) *fd = -1;
  int got = -1;
  int r = ReadFull(sock, f, sizeof *f, fd ? &got : nullptr);
  UniqueFD passed(got);  // the caller's only once the whole frame arrived
  if (r != 0) return r;
  if (f->magic != kMagic || f->len > kMaxPayload || f->len > cap) return -EPROTO;
  if (f->len) {
    r = ReadFull(sock, buf, f->len, nullptr);
    if (r != 0) return r;
  }
  if (fd) *fd = passed.Release();
  return 0;
}

int Connect(const char* path, int timeout_ms) noexcept {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n >= sizeof addr.sun_path) return -ENAMETOOLONG;
  memcpy(addr.sun_path, path, n);
  UniqueFD s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return -errno;
  if (timeout_ms > 0) {
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  if (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0)
    return -errno;
  return s.Release();
}

}  // namespace fanstore::proto
