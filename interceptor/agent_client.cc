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
  // The reply arrives only after the agent has the file (perhaps fetched from another node),
  // so the default timeout is generous (kDefaultOpenTimeoutMs).
  int sock = proto::Connect(socket_path, timeout_ms);
  int result = -EIO;
  const char* stage = "connect";
  int err = 0;
  if (sock < 0) {
    err = -sock;
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
  if (sock >= 0) Real().close(sock);
  return result;
}

}  // namespace fanstore::interceptor
