// AgentOpen: one connection per request. A connection per process would save a connect
// (~10 us, small next to a remote fetch) but would need care across fork and threads.
#include "interceptor/agent_client.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "common/proto.h"
#include "interceptor/state.h"

namespace fanstore::interceptor {

int AgentOpen(const char* socket_path, std::string_view rel, int timeout_ms) noexcept {
  if (!socket_path || !*socket_path) {
    FS_ILOG(1, "open of remote file '%.*s': no agent socket configured",
            static_cast<int>(rel.size()), rel.data());
    return -EIO;
  }
  if (rel.size() > proto::kMaxPayload) return -ENAMETOOLONG;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t n = strlen(socket_path);
  if (n >= sizeof addr.sun_path) return -EIO;
  memcpy(addr.sun_path, socket_path, n);

  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -EIO;
  // Timeouts bound every step: connect (a full backlog blocks it; Unix sockets honour
  // SO_SNDTIMEO there), the request, and the reply, which arrives only after the agent has
  // fetched the file, so the default is generous (kDefaultOpenTimeoutMs).
  if (timeout_ms > 0) {
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  int result = -EIO;
  const char* stage = "connect";
  int err = 0;
  if (connect(sock, reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0) {
    err = errno;
  } else {
    proto::Frame req = {proto::kMagic, proto::kOpen, 0, static_cast<uint32_t>(rel.size())};
    stage = "send";
    err = -proto::Send(sock, req, rel.data(), -1);
    if (err == 0) {
      proto::Frame reply;
      int fd = -1;
      stage = "receive";
      err = -proto::Recv(sock, &reply, nullptr, 0, &fd);
      if (err == 0) {
        if (reply.op != proto::kOpen) {
          err = EPROTO;
          if (fd >= 0) Real().close(fd);
        } else if (reply.status != 0) {
          if (fd >= 0) Real().close(fd);
          // The agent's answer for this file; anything that is not an errno becomes EIO.
          result = reply.status > 0 && reply.status < 4096 ? -reply.status : -EIO;
          stage = nullptr;
        } else if (fd < 0) {
          err = EPROTO;
        } else {
          result = fd;
          stage = nullptr;
        }
      }
    }
  }
  if (stage) {
    FS_ILOG(1, "open of remote file '%.*s': agent at %s: %s failed: %s",
            static_cast<int>(rel.size()), rel.data(), socket_path, stage,
            strerror(err == EAGAIN ? ETIMEDOUT : err));
  }
  Real().close(sock);
  return result;
}

}  // namespace fanstore::interceptor
