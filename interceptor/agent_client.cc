// AgentOpen over a few connections kept per process. A new connection costs a connect and, in
// the agent, a thread (about 85 us of a remote open here); kept ones are reused.
//   - Threads: an idle list under a mutex; a connection is used by one request at a time.
//   - fork: the child drops the idle list it inherited (those sockets stay the parent's).
//   - vfork child: never touches the list (it shares our memory), uses a connection of its own.
//   - The program closing our descriptor behind our back: a kept connection is checked with
//     fstat (device and inode of its socket) before reuse; if the number now names something
//     else, it is forgotten, never closed or written to.
#include "interceptor/agent_client.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>

#include "common/proto.h"
#include "interceptor/state.h"

namespace fanstore::interceptor {
namespace {

struct Kept {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  bool identified = false;  // dev and ino are known
};
constexpr int kKeepMax = 4;
pthread_mutex_t g_keep_mu = PTHREAD_MUTEX_INITIALIZER;
Kept g_kept[kKeepMax];
int g_nkept = 0;
pthread_once_t g_keep_once = PTHREAD_ONCE_INIT;

void ForkPrepare() { pthread_mutex_lock(&g_keep_mu); }
void ForkParent() { pthread_mutex_unlock(&g_keep_mu); }
void ForkChild() {
  for (int i = 0; i < g_nkept; i++) RealClose()(g_kept[i].fd);
  g_nkept = 0;
  pthread_mutex_unlock(&g_keep_mu);
}
void RegisterFork() { pthread_atfork(ForkPrepare, ForkParent, ForkChild); }

bool Identify(int fd, Kept* k) {
  struct stat st;
  if (Real().fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  *k = Kept{fd, st.st_dev, st.st_ino, true};
  return true;
}

// A kept connection that still is ours (checked with one fstat), or one with fd -1.
Kept TakeKept() {
  pthread_once(&g_keep_once, RegisterFork);
  while (true) {
    // trylock: open() is async-signal-safe, so a handler may get here while this thread holds
    // the lock; it then simply connects anew.
    if (pthread_mutex_trylock(&g_keep_mu) != 0) return Kept{};
    if (g_nkept == 0) {
      pthread_mutex_unlock(&g_keep_mu);
      return Kept{};
    }
    const Kept k = g_kept[--g_nkept];
    pthread_mutex_unlock(&g_keep_mu);
    Kept now;
    if (Identify(k.fd, &now) && now.dev == k.dev && now.ino == k.ino) return k;
  }
}

// Keeps a connection that just completed a request (identifying it if it is new), or closes it
// when enough are kept.
void Keep(Kept k) {
  RealFD owned(k.fd);  // closed unless it joins the idle list
  if (!k.identified && !Identify(k.fd, &k)) return;
  if (pthread_mutex_trylock(&g_keep_mu) == 0) {
    if (g_nkept < kKeepMax) g_kept[g_nkept++] = Kept{owned.Release(), k.dev, k.ino, true};
    pthread_mutex_unlock(&g_keep_mu);
  }
}

// One kOpen request on `sock`. Returns the descriptor or -errno for the file (*transport
// false), or sets *transport and *stage when the connection failed.
int Request(int sock, std::string_view rel, bool* transport, const char** stage, int* err) {
  proto::Frame req = {proto::kMagic, proto::kOpen, 0, static_cast<uint32_t>(rel.size())};
  *stage = "send";
  *err = -proto::Send(sock, req, rel.data(), -1);
  if (*err != 0) {
    *transport = true;
    return -EIO;
  }
  proto::Frame reply;
  int got = -1;
  *stage = "receive";
  *err = -proto::Recv(sock, &reply, nullptr, 0, &got);
  RealFD fd(got);
  if (*err != 0 || reply.op != proto::kOpen || (reply.status == 0 && !fd.valid())) {
    if (*err == 0) *err = EPROTO;
    *transport = true;
    return -EIO;
  }
  *transport = false;
  // The agent's answer for this file; anything that is not an errno becomes EIO.
  if (reply.status != 0) return reply.status > 0 && reply.status < 4096 ? -reply.status : -EIO;
  return fd.Release();
}

}  // namespace

int AgentOpen(const char* socket_path, std::string_view rel, int timeout_ms) noexcept {
  if (!socket_path || !*socket_path) {
    FS_ILOG(1, "open of remote file '%.*s': no agent socket configured",
            static_cast<int>(rel.size()), rel.data());
    return -EIO;
  }
  if (rel.size() > proto::kMaxPayload) return -ENAMETOOLONG;
  // The reply arrives only after the agent has the file (perhaps fetched from another node),
  // so the default timeout is generous (kDefaultOpenTimeoutMs).
  const bool pooled = !InVforkChild();
  const char* stage = "connect";
  int err = 0;
  // A kept connection first; if it fails (the agent closed it, say), once more on a new one.
  for (int attempt = 0; attempt < 2; attempt++) {
    Kept conn = pooled && attempt == 0 ? TakeKept() : Kept{};
    if (conn.fd < 0) {
      attempt = 1;
      stage = "connect";
      conn.fd = proto::Connect(socket_path, timeout_ms);
      if (conn.fd < 0) {
        err = -conn.fd;
        break;
      }
    }
    RealFD sock(conn.fd);
    bool transport = false;
    int r = Request(sock.get(), rel, &transport, &stage, &err);
    if (transport) {
      if (err == EAGAIN) break;  // timed out: the agent is slow, not gone; do not ask twice
      continue;
    }
    if (pooled) {
      conn.fd = sock.Release();
      Keep(conn);
    }
    return r;
  }
  FS_ILOG(1, "open of remote file '%.*s': agent at %s: %s failed: %s", static_cast<int>(rel.size()),
          rel.data(), socket_path, stage, strerror(err == EAGAIN ? ETIMEDOUT : err));
  return -EIO;
}

}  // namespace fanstore::interceptor
