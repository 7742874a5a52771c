// The peer data service: an epoll loop that authenticates connections and serves files and
// whole shards from the node's staged data.
#include "agent/peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "agent/peer_io.h"
#include "agent/peer_wire.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace fanstore::agent {

using peer_io::Clock;
using peer_io::kFilePiece;
using peer_io::MsLeft;
using peer_io::SendAll;
using peer_io::SendIov;
using peer_io::SetNoDelay;
using peer_io::SocketEndpoint;
using wire::Header;

struct PeerServer::Conn {
  UniqueFD fd;
  // Written by the handshake's thread, read by the loop's (which counts and picks connections).
  std::atomic<wire::Phase> phase{wire::Phase::kHello};
  std::string in;  // the request being received; never more than its checked size
  Clock::time_point deadline = Clock::time_point::max();
  bool busy = false;                      // on the pool
  Clock::time_point used = Clock::now();  // accepted, or its last request answered
  uint32_t client_rank = 0;
  wire::Nonce nonce_c{}, nonce_s{};
  wire::Key share_s{};
  wire::Mac rx, tx;
};

PeerServer::PeerServer() = default;
PeerServer::~PeerServer() { Stop(); }

Status PeerServer::Start(const std::string& addr, PeerIdentity me, LocalFileFn local,
                         ShardFilesFn shard_files, ThreadPool* pool, ThreadPool* streams,
                         MessageFn messages) {
  me_ = std::move(me);
  local_ = std::move(local);
  shard_files_ = std::move(shard_files);
  messages_ = std::move(messages);
  pool_ = pool;
  streams_ = streams ? streams : pool;
  handshakes_ = std::make_unique<ThreadPool>(kHandshakeThreads);
  addr_ = addr;
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    return Status::InvalidArgument("peer service: address " + addr);
  // The connections of an agent that died do not hold its port for a minute: any process may
  // take it at once, as it may any free port. The peers' proofs, not the port, say who is who.
  // Another process may also take the port between bind and listen: then a new one is drawn.
  for (int attempt = 0;; attempt++) {
    listen_fd_.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listen_fd_.valid()) return Status::FromErrno("peer service: socket", errno);
    const int one = 1;
    if (::setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
      return Status::FromErrno("peer service: SO_REUSEADDR", errno);
    if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
        ::listen(listen_fd_.get(), 256) == 0)
      break;
    if (errno != EADDRINUSE || attempt == 4)
      return Status::FromErrno("peer service: bind/listen on " + addr, errno);
  }
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_fd_.valid() || !wake_fd_.valid())
    return Status::FromErrno("peer service: epoll", errno);
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_.get();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev);
  ev.data.fd = wake_fd_.get();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev);
  loop_ = std::thread([this] { Loop(); });
  return Status::OK();
}

std::string PeerServer::Endpoint() const {
  return port_ == 0 ? "" : addr_ + ":" + std::to_string(port_);
}

void PeerServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_.valid()) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_.get(), &one, sizeof one);
    (void)ignored;
  }
  if (loop_.joinable()) loop_.join();
  {
    // A thread still serving a connection owns it until it returns: its socket is shut down so
    // that a send or receive in progress ends at once (a wait for a gathered message ends with
    // the gather, which the agent ends first), and the connections are freed only after.
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [fd, c] : conns_)
      if (c->busy) ::shutdown(fd, SHUT_RDWR);
  }
  for (int i = 0; busy_.load() > 0; i++) {
    if (i == 300)
      LOG_WARN("peer service: %d requests still being served 3 s after stop", busy_.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  handshakes_.reset();
  std::lock_guard<std::mutex> l(mu_);
  conns_.clear();
  for (UniqueFD* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) fd->Reset();
}

int PeerServer::NextTimeoutMs() {
  Clock::time_point next = accept_paused_ ? accept_resume_ : Clock::time_point::max();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [fd, c] : conns_)
    if (!c->busy) next = std::min(next, c->deadline);
  return next == Clock::time_point::max() ? -1 : MsLeft(next);
}

void PeerServer::Loop() {
  struct epoll_event evs[64];
  while (!stopping_) {
    int n = ::epoll_wait(epoll_fd_.get(), evs, 64, NextTimeoutMs());
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == wake_fd_.get()) return;
      if (fd == listen_fd_.get())
        Accept();
      else
        OnReadable(fd);
    }
    EvictIdle();
    const auto now = Clock::now();
    if (accept_paused_ && now >= accept_resume_) {
      struct epoll_event ev = {};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_.get();
      accept_paused_ = ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) != 0;
      if (accept_paused_) accept_resume_ = now + std::chrono::milliseconds(100);
    }
    // Connections past their deadline: a handshake or a request that did not come in time.
    std::vector<int> late;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [cfd, c] : conns_)
        if (!c->busy && c->deadline <= now) late.push_back(cfd);
    }
    for (int cfd : late) {
      refused_++;
      Drop(cfd);
    }
  }
}

void PeerServer::Accept() {
  while (true) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors or memory: stop accepting for a moment instead of spinning on a
        // listening socket that stays readable.
        LOG_WARN("peer service: accept: %s; pausing for 100 ms", std::strerror(errno));
        ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
        accept_paused_ = true;
        accept_resume_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    auto c = std::make_unique<Conn>();
    c->fd.Reset(fd);
    std::lock_guard<std::mutex> l(mu_);
    int unauth = 0;
    for (auto& [cfd, o] : conns_) unauth += o->phase != wire::Phase::kReady;
    // At the cap of connections not yet authenticated, the oldest one that is not being
    // answered makes room, whatever it has sent (a peer's handshake takes milliseconds), one
    // still in its hello first: a flood of connections that stay silent, or send a hello a byte
    // at a time, cannot hold the slots that the job's peers need for their handshakes.
    if (unauth >= kMaxUnauthenticated && DropUnauthenticatedLocked()) unauth--;
    if (unauth >= kMaxUnauthenticated ||
        static_cast<int>(conns_.size()) >= max_conns_.load() + kMaxUnauthenticated) {
      refused_++;  // c closes the connection: nothing is read from it
      continue;
    }
    SetNoDelay(fd);
    c->deadline = Clock::now() + std::chrono::milliseconds(kHandshakeMs);
    struct epoll_event ev = {};
    ev.events = EPOLLIN | EPOLLONESHOT | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) == 0) conns_.emplace(fd, std::move(c));
  }
}

// The connection, among those not on the pool, that is the oldest by `key` and passes `want`;
// erased (and closed). Runs on the loop's thread, which alone reads `in` of a connection not on
// the pool.
template <typename Want, typename Key>
bool PeerServer::DropOldestLocked(Want want, Key key) {
  auto oldest = conns_.end();
  for (auto it = conns_.begin(); it != conns_.end(); ++it) {
    const Conn& c = *it->second;
    if (c.busy || !want(c)) continue;
    if (oldest == conns_.end() || key(c) < key(*oldest->second)) oldest = it;
  }
  if (oldest == conns_.end()) return false;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, oldest->first, nullptr);
  conns_.erase(oldest);
  return true;
}

bool PeerServer::DropUnauthenticatedLocked() {
  // Those still in their hello go first: anyone can open them at the network's rate, where one
  // past it has had this agent's credential, which the handshake pool hands out at its own pace.
  const bool dropped = DropOldestLocked(
      [](const Conn& c) { return c.phase != wire::Phase::kReady; },
      [](const Conn& c) { return std::make_pair(c.phase != wire::Phase::kHello, c.deadline); });
  refused_ += dropped;
  return dropped;
}

// Past kMaxConnections authenticated connections, the ones idle the longest close (their clients
// dial again when they next need this node); not one used in the last second, so that more
// readers than the cap shed load instead of churning handshakes.
void PeerServer::EvictIdle() {
  std::lock_guard<std::mutex> l(mu_);
  if (static_cast<int>(conns_.size()) <= max_conns_.load()) return;  // the usual case: no scan
  int ready = 0;
  for (auto& [fd, c] : conns_) ready += c->phase == wire::Phase::kReady;
  const auto recent = Clock::now() - std::chrono::seconds(1);
  // Not one with part of a request read: its next bytes would start a new one.
  auto idle = [recent](const Conn& c) {
    return c.phase == wire::Phase::kReady && c.in.empty() && c.used < recent;
  };
  while (ready > max_conns_.load() &&
         DropOldestLocked(idle, [](const Conn& c) { return c.used; })) {
    ready--;
    evicted_++;
  }
}

// Reads what has arrived of the connection's request, never more than its checked size, and
// hands it to the pool once it is whole.
void PeerServer::OnReadable(int fd) {
  Conn* c;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = conns_.find(fd);
    if (it == conns_.end() || it->second->busy) return;
    c = it->second.get();
  }
  while (true) {
    auto need = wire::RequestSize(c->phase, c->in);
    if (!need.ok()) {
      refused_++;
      LOG_WARN("peer service: dropped a connection from %s: %s", SocketEndpoint(fd, true).c_str(),
               need.status().ToString().c_str());
      return Drop(fd);
    }
    if (*need == 0) break;
    const size_t have = c->in.size();
    c->in.resize(*need);
    ssize_t r = ::recv(fd, c->in.data() + have, *need - have, MSG_DONTWAIT);
    c->in.resize(have + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Rearm(c);
    if (r <= 0) return Drop(fd);
    // A request begun must end in time; an idle authenticated connection may wait.
    if (c->phase == wire::Phase::kReady && have == 0)
      c->deadline = Clock::now() + std::chrono::milliseconds(kRequestMs);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    c->busy = true;
  }
  busy_++;
  // The op only picks the pool: Serve checks the request's tag before acting on it.
  ThreadPool* to = handshakes_.get();
  if (c->phase == wire::Phase::kReady) {
    wire::Header h{};
    if (c->in.size() >= sizeof h) std::memcpy(&h, c->in.data(), sizeof h);
    // Streams, and gathers that may wait for their messages, keep the files' pool free.
    to = h.op == wire::kGetShard || h.op == wire::kGetMessages ? streams_ : pool_;
  }
  to->Submit([this, c] {
    Serve(c);
    busy_--;
  });
}

void PeerServer::Rearm(Conn* c) {
  const int fd = c->fd.get();
  struct epoll_event ev = {};
  ev.events = EPOLLIN | EPOLLONESHOT | EPOLLRDHUP;
  ev.data.fd = fd;
  bool armed;
  {
    // Under the lock: once not busy, the loop may drop (and close) it at its deadline.
    std::lock_guard<std::mutex> l(mu_);
    c->busy = false;
    c->used = Clock::now();
    armed = ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, fd, &ev) == 0;
  }
  if (!armed) Drop(fd);
}

void PeerServer::Drop(int fd) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  conns_.erase(it);
}

void PeerServer::Serve(Conn* c) {
  if (stopping_) return;
  const bool keep = c->phase == wire::Phase::kReady ? Request(c) : Handshake(c);
  if (!keep) return Drop(c->fd.get());
  c->in.clear();
  c->deadline = c->phase == wire::Phase::kReady ? Clock::time_point::max() : c->deadline;
  Rearm(c);
}

void PeerServer::Refuse(Conn* c, const std::string& why) {
  refused_++;
  LOG_WARN("peer service: refused a connection from %s: %s",
           SocketEndpoint(c->fd.get(), true).c_str(), why.c_str());
  Header h;
  std::memcpy(&h, c->in.data(), sizeof h);
  Header rp{wire::kMagic, h.op, static_cast<uint32_t>(EACCES), me_.rank, 0};
  SendAll(c->fd.get(), &rp, sizeof rp);
}

bool PeerServer::Handshake(Conn* c) {
  Header h;
  std::memcpy(&h, c->in.data(), sizeof h);
  const std::string_view payload(c->in.data() + sizeof h, c->in.size() - sizeof h);
  wire::Binding b;
  b.job = me_.job;
  b.server_rank = me_.rank;
  b.server_ep = SocketEndpoint(c->fd.get(), false);
  b.client_ep = SocketEndpoint(c->fd.get(), true);
  if (c->phase == wire::Phase::kHello) {
    if (h.b != me_.rank) return Refuse(c, "asked for rank " + std::to_string(h.b)), false;
    c->client_rank = h.a;
    std::memcpy(c->nonce_c.data(), payload.data(), wire::kNonceLen);
    wire::Random(c->nonce_s.data(), c->nonce_s.size());
    wire::Random(c->share_s.data(), c->share_s.size());
    b.role = 'S';
    b.client_rank = c->client_rank;
    b.nonce_c = c->nonce_c;
    b.nonce_s = c->nonce_s;
    b.key_share = c->share_s;
    auto cred = MungeCredential(wire::EncodeBinding(b));
    if (!cred.ok()) {
      LOG_WARN("peer service: %s", cred.status().ToString().c_str());
      return false;
    }
    Header rp{wire::kMagic, wire::kHello, 0, me_.rank, wire::kNonceLen + cred->size()};
    struct iovec iov[3] = {
        {&rp, sizeof rp}, {c->nonce_s.data(), wire::kNonceLen}, {cred->data(), cred->size()}};
    c->phase = wire::Phase::kAuth;
    return SendIov(c->fd.get(), iov, 3);
  }
  // kAuth: the client's credential, bound to this connection's nonces and endpoints.
  auto d = MungeVerify(std::string(payload));
  if (!d.ok()) return Refuse(c, d.status().ToString()), false;
  if (d->uid != ::getuid())
    return Refuse(c, "credential of uid " + std::to_string(d->uid) + ", not the job's"), false;
  auto got = wire::DecodeBinding(d->payload);
  if (!got.ok()) return Refuse(c, got.status().ToString()), false;
  b.role = 'C';
  b.client_rank = c->client_rank;
  b.nonce_c = c->nonce_c;
  b.nonce_s = c->nonce_s;
  Status bound = wire::CheckBinding(b, *got);
  if (!bound.ok()) return Refuse(c, bound.ToString()), false;
  const wire::Key key = wire::SessionKey(c->share_s, got->key_share, c->nonce_c, c->nonce_s);
  c->rx = wire::Mac(key, false);
  c->tx = wire::Mac(key, true);
  c->phase = wire::Phase::kReady;
  Header rp{wire::kMagic, wire::kAuth, 0, me_.rank, 0};
  c->tx.Begin(rp);
  wire::Tag t = c->tx.Finish();
  struct iovec iov[2] = {{&rp, sizeof rp}, {t.data(), t.size()}};
  return SendIov(c->fd.get(), iov, 2);
}

bool PeerServer::Request(Conn* c) {
  Header h;
  std::memcpy(&h, c->in.data(), sizeof h);
  wire::Tag t;
  std::memcpy(t.data(), c->in.data() + sizeof h, t.size());
  c->rx.Begin(h);
  if (!c->rx.Verify(t)) {
    refused_++;
    LOG_WARN("peer service: a request from %s failed its authentication tag; connection dropped",
             SocketEndpoint(c->fd.get(), true).c_str());
    return false;
  }
  auto reply_status = [&](uint32_t op, int status, uint32_t b) {
    Header rp{wire::kMagic, op, static_cast<uint32_t>(status), b, 0};
    c->tx.Begin(rp);
    wire::Tag tag = c->tx.Finish();
    struct iovec iov[2] = {{&rp, sizeof rp}, {tag.data(), tag.size()}};
    return SendIov(c->fd.get(), iov, 2);
  };
  if (h.op == wire::kGetShard) {
    int status = 0;
    for (uint32_t entry : shard_files_(h.a)) {
      int fd = -1;
      uint64_t size = 0;
      status = local_(h.a, entry, &fd, &size);
      if (status != 0) break;
      if (!SendFile(c, wire::kGetShard, entry, fd, size)) return false;
    }
    return reply_status(wire::kGetShard, status, wire::kEndOfShard);
  }
  if (h.op == wire::kGetMessages) {
    if (!messages_ || h.b == 0) return reply_status(wire::kGetMessages, EINVAL, h.a);
    return SendMessages(c, h.a, h.b);
  }
  int fd = -1;
  uint64_t size = 0;
  int status = local_(h.a, h.b, &fd, &size);
  if (status != 0) return reply_status(wire::kGet, status, h.b);
  return SendFile(c, wire::kGet, h.b, fd, size);
}

// The messages of ranks first, first + 1, ... (count of them, modulo the job's size), each as
// soon as the agent has it. The first that does not come in time (kMessageWaitMs for the whole
// request) ends the reply with its errno: the client fetches the rest elsewhere.
bool PeerServer::SendMessages(Conn* c, uint32_t first, uint32_t count) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(kMessageWaitMs);
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t r = me_.size ? static_cast<uint32_t>((uint64_t{first} + i) % me_.size) : first;
    std::shared_ptr<const std::string> m;
    const int status = count > me_.size ? EINVAL : messages_(r, MsLeft(deadline), &m);
    Header rp{wire::kMagic, wire::kGetMessages, static_cast<uint32_t>(status), r,
              status == 0 ? m->size() : 0};
    c->tx.Begin(rp);
    if (status == 0) c->tx.Update(m->data(), m->size());
    wire::Tag tag = c->tx.Finish();
    struct iovec iov[3];
    int k = 0;
    iov[k++] = {&rp, sizeof rp};
    if (status == 0 && !m->empty()) iov[k++] = {const_cast<char*>(m->data()), m->size()};
    iov[k++] = {tag.data(), tag.size()};
    if (!SendIov(c->fd.get(), iov, k, i + 1 < count && status == 0 ? MSG_MORE : 0)) return false;
    if (status != 0) return true;
  }
  return true;
}

// Sends a reply header, the file's content and the tag over both; takes ownership of fd. A
// small file leaves in one sendmsg; MSG_MORE lets a shard's stream of them fill whole segments.
bool PeerServer::SendFile(Conn* c, uint32_t op, uint32_t entry, int fd, uint64_t size) {
  UniqueFD file(fd);
  thread_local std::unique_ptr<char[]> buf(new char[kFilePiece]);
  Header rp{wire::kMagic, op, 0, entry, size};
  c->tx.Begin(rp);
  const int more = op == wire::kGetShard ? MSG_MORE : 0;
  uint64_t off = 0;
  bool first = true;
  do {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size - off, kFilePiece));
    for (size_t got = 0; got < n;) {
      ssize_t r = ::pread(file.get(), buf.get() + got, n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;  // the peer sees the connection end: it tries another source
      got += static_cast<size_t>(r);
    }
    c->tx.Update(buf.get(), n);
    off += n;
    struct iovec iov[3];
    int k = 0;
    if (first) iov[k++] = {&rp, sizeof rp};
    iov[k++] = {buf.get(), n};
    wire::Tag tag;
    if (off == size) {
      tag = c->tx.Finish();
      iov[k++] = {tag.data(), tag.size()};
    }
    if (!SendIov(c->fd.get(), iov, k, off == size ? more : MSG_MORE)) return false;
    first = false;
  } while (off < size);
  return true;
}

// --- client ----------------------------------------------------------------------------------

}  // namespace fanstore::agent
