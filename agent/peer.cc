// The peer data service and its client.
#include "agent/peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <munge.h>
#include <net/if.h>
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

#include "agent/peer_wire.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

using Clock = std::chrono::steady_clock;
using wire::Header;

constexpr int kConnectTimeoutMs = 1500;
constexpr int kIoTimeoutMs = 3000;  // per send or receive without progress, not per transfer
constexpr auto kDownFor = std::chrono::seconds(10);
constexpr size_t kShardPiece = 4u << 20;
constexpr size_t kFilePiece = 1u << 20;

int MsLeft(Clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits until fd is ready for `events`, at most kIoTimeoutMs.
bool WaitFor(int fd, short events) {
  struct pollfd p = {fd, events, 0};
  int r;
  while ((r = ::poll(&p, 1, kIoTimeoutMs)) < 0 && errno == EINTR) {
  }
  return r == 1;
}

// Sends every byte of `iov` (modified). On the server's non-blocking sockets it waits while
// the socket is full, at most kIoTimeoutMs each time; client sockets block with SO_SNDTIMEO.
bool SendIov(int fd, struct iovec* iov, int n, int flags = 0) {
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

bool SendAll(int fd, const void* buf, size_t len, int flags = 0) {
  struct iovec v = {const_cast<void*>(buf), len};
  return SendIov(fd, &v, 1, flags);
}

// Client side: blocking receives on a socket with SO_RCVTIMEO (one system call per receive
// where a poll first would make it three; a timeout fails the receive).
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

// Receives a stream into one growing buffer and hands out contiguous pieces of it.
class RecvBuffer {
 public:
  explicit RecvBuffer(int fd) : fd_(fd) {}
  // The next n bytes, valid until the next call; nullptr when the connection ends first.
  const char* Take(size_t n) {
    if (end_ - pos_ < n) {
      // Move what is left to the front, make room for n, and receive at least the rest.
      if (end_ > pos_) std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
      end_ -= pos_;
      pos_ = 0;
      if (buf_.size() < std::max(n, kMin)) buf_.resize(std::max(n, kMin));
      while (end_ < n) {
        ssize_t r = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return nullptr;
        end_ += static_cast<size_t>(r);
      }
    }
    const char* p = buf_.data() + pos_;
    pos_ += n;
    return p;
  }
  size_t buffered() const { return end_ - pos_; }

 private:
  static constexpr size_t kMin = 4u << 20;
  int fd_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
};

std::string FormatEndpoint(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
}

// "a.b.c.d:port" of either end of a connected socket.
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

// A client connection: blocking, with a bound on each wait.
void SetBlockingWithTimeouts(int fd) {
  ::fcntl(fd, F_SETFL, 0);
  struct timeval tv = {kIoTimeoutMs / 1000, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  SetNoDelay(fd);
}

std::string Rank(uint32_t r) { return "peer " + std::to_string(r); }

}  // namespace

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
  const char* launch = std::getenv("SLURM_LAUNCH_NODE_IPADDR");
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

struct PeerServer::Conn {
  UniqueFD fd;
  wire::Phase phase = wire::Phase::kHello;
  std::string in;  // the request being received; never more than its checked size
  Clock::time_point deadline = Clock::time_point::max();
  bool busy = false;  // on the pool
  uint32_t client_rank = 0;
  wire::Nonce nonce_c{}, nonce_s{};
  wire::Key share_s{};
  wire::Mac rx, tx;
};

PeerServer::PeerServer() = default;
PeerServer::~PeerServer() { Stop(); }

Status PeerServer::Start(const std::string& addr, PeerIdentity me, LocalFileFn local,
                         ShardFilesFn shard_files, ThreadPool* pool) {
  me_ = std::move(me);
  local_ = std::move(local);
  shard_files_ = std::move(shard_files);
  pool_ = pool;
  addr_ = addr;
  listen_fd_.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_.valid()) return Status::FromErrno("peer service: socket", errno);
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    return Status::InvalidArgument("peer service: address " + addr);
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listen_fd_.get(), 256) != 0)
    return Status::FromErrno("peer service: bind/listen on " + addr, errno);
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
  for (int i = 0; i < 300 && busy_.load() > 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
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
    if (unauth >= kMaxUnauthenticated || static_cast<int>(conns_.size()) >= kMaxConnections) {
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
  pool_->Submit([this, c] {
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
  int fd = -1;
  uint64_t size = 0;
  int status = local_(h.a, h.b, &fd, &size);
  if (status != 0) return reply_status(wire::kGet, status, h.b);
  return SendFile(c, wire::kGet, h.b, fd, size);
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

struct PeerClient::Session {
  UniqueFD fd;
  wire::Mac tx, rx;
};

PeerClient::PeerClient() = default;
PeerClient::~PeerClient() = default;

bool PeerClient::IsDown(uint32_t rank) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = down_until_.find(rank);
  return it != down_until_.end() && Clock::now() < it->second;
}

void PeerClient::MarkDown(uint32_t rank) {
  std::lock_guard<std::mutex> l(mu_);
  down_until_[rank] = Clock::now() + kDownFor;
  idle_[rank].clear();
}

void PeerClient::Release(uint32_t rank, std::unique_ptr<Session> s) {
  std::lock_guard<std::mutex> l(mu_);
  idle_[rank].push_back(std::move(s));
}

Status PeerClient::Handshake(Session* s, uint32_t rank) {
  const int fd = s->fd.get();
  const std::string who = Rank(rank);
  wire::Binding want;
  want.role = 'S';
  want.job = me_.job;
  want.server_rank = rank;
  want.client_rank = me_.rank;
  want.server_ep = SocketEndpoint(fd, true);
  want.client_ep = SocketEndpoint(fd, false);
  wire::Random(want.nonce_c.data(), want.nonce_c.size());
  Header hello{wire::kMagic, wire::kHello, me_.rank, rank, wire::kNonceLen};
  struct iovec iov[2] = {{&hello, sizeof hello}, {want.nonce_c.data(), wire::kNonceLen}};
  Header rp;
  if (!SendIov(fd, iov, 2) || !RecvAll(fd, &rp, sizeof rp) || rp.magic != wire::kMagic ||
      rp.op != wire::kHello)
    return Status::IOError(who + ": no answer to the handshake");
  if (rp.a != 0)
    return Status::Permission(who +
                              " refused the handshake: " + std::strerror(static_cast<int>(rp.a)));
  if (rp.len <= wire::kNonceLen || rp.len > wire::kNonceLen + wire::kMaxCred)
    return Status::Permission(who + ": handshake reply of " + std::to_string(rp.len) + " bytes");
  std::string reply(static_cast<size_t>(rp.len), '\0');
  if (!RecvAll(fd, reply.data(), reply.size()))
    return Status::IOError(who + ": handshake cut short");
  std::memcpy(want.nonce_s.data(), reply.data(), wire::kNonceLen);
  // The server proves itself first: a credential of the job's uid, bound to our nonce, to
  // this connection's endpoints and to the rank we dialled. Only then do we send ours.
  auto d = MungeVerify(reply.substr(wire::kNonceLen));
  if (!d.ok()) return d.status().Prefixed(who + " did not prove itself");
  if (d->uid != ::getuid())
    return Status::Permission(who + " did not prove itself: a credential of uid " +
                              std::to_string(d->uid) + ", not the job's");
  auto got = wire::DecodeBinding(d->payload);
  if (!got.ok()) return got.status().Prefixed(who + " did not prove itself");
  FS_RETURN_IF_ERROR(wire::CheckBinding(want, *got).Prefixed(who + " did not prove itself"));
  wire::Binding mine = want;
  mine.role = 'C';
  wire::Random(mine.key_share.data(), mine.key_share.size());
  auto cred = MungeCredential(wire::EncodeBinding(mine));
  if (!cred.ok()) return cred.status();
  const wire::Key key =
      wire::SessionKey(got->key_share, mine.key_share, want.nonce_c, want.nonce_s);
  s->tx = wire::Mac(key, false);
  s->rx = wire::Mac(key, true);
  Header auth{wire::kMagic, wire::kAuth, me_.rank, rank, cred->size()};
  struct iovec a_iov[2] = {{&auth, sizeof auth}, {cred->data(), cred->size()}};
  wire::Tag tag;
  if (!SendIov(fd, a_iov, 2) || !RecvAll(fd, &rp, sizeof rp) || rp.magic != wire::kMagic ||
      rp.op != wire::kAuth)
    return Status::IOError(who + ": authentication failed");
  if (rp.a != 0) return Status::Permission(who + " refused our credential");
  s->rx.Begin(rp);
  if (rp.len != 0 || !RecvAll(fd, tag.data(), tag.size()) || !s->rx.Verify(tag))
    return Status::Permission(who + ": the session's first message failed its tag");
  return Status::OK();
}

Result<std::unique_ptr<PeerClient::Session>> PeerClient::Dial(uint32_t rank) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& v = idle_[rank];
    if (!v.empty()) {
      auto s = std::move(v.back());
      v.pop_back();
      return s;
    }
  }
  if (rank >= endpoints_.size() || endpoints_[rank].empty())
    return Status::NotFound("no endpoint for rank " + std::to_string(rank));
  const std::string& ep = endpoints_[rank];
  const size_t colon = ep.rfind(':');
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  char* end = nullptr;
  const long port = colon == std::string::npos ? 0 : std::strtol(ep.c_str() + colon + 1, &end, 10);
  if (port <= 0 || port > 65535 || *end ||
      ::inet_pton(AF_INET, ep.substr(0, colon).c_str(), &sa.sin_addr) != 1)
    return Status::InvalidArgument(Rank(rank) + ": bad endpoint '" + ep + "'");
  sa.sin_port = htons(static_cast<uint16_t>(port));
  auto s = std::make_unique<Session>();
  s->fd.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s->fd.valid()) return Status::FromErrno("socket", errno);
  int rc = ::connect(s->fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  if (rc != 0 && errno == EINPROGRESS) {
    struct pollfd p = {s->fd.get(), POLLOUT, 0};
    rc = ::poll(&p, 1, kConnectTimeoutMs) == 1 ? 0 : -1;
    int err = 0;
    socklen_t len = sizeof err;
    if (rc == 0) ::getsockopt(s->fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc != 0 || err != 0)
      return Status::IOError("connect " + ep + ": " + (rc ? "timed out" : std::strerror(err)));
  } else if (rc != 0) {
    return Status::FromErrno("connect " + ep, errno);
  }
  SetBlockingWithTimeouts(s->fd.get());
  FS_RETURN_IF_ERROR(Handshake(s.get(), rank));
  return s;
}

Result<std::unique_ptr<PeerClient::Session>> PeerClient::Connect(uint32_t rank) {
  if (IsDown(rank)) return Status::IOError(Rank(rank) + " is marked down");
  auto s = Dial(rank);
  if (!s.ok()) {
    if (s.status().code() == Status::Code::kPermission)
      LOG_WARN("%s", s.status().ToString().c_str());
    MarkDown(rank);
  }
  return s;
}

Status PeerClient::Fetch(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
                         const std::function<Status(std::string_view)>& sink) {
  auto c = Connect(rank);
  if (!c.ok()) return c.status();
  std::unique_ptr<Session> s = std::move(c).value();
  const int fd = s->fd.get();
  const std::string who = Rank(rank);
  Header rq{wire::kMagic, wire::kGet, shard, entry, 0};
  s->tx.Begin(rq);
  wire::Tag tag = s->tx.Finish();
  struct iovec iov[2] = {{&rq, sizeof rq}, {tag.data(), tag.size()}};
  Header rp;
  if (!SendIov(fd, iov, 2) || !RecvAll(fd, &rp, sizeof rp) || rp.magic != wire::kMagic ||
      rp.op != wire::kGet || rp.b != entry) {
    MarkDown(rank);
    return Status::IOError(who + ": connection lost");
  }
  s->rx.Begin(rp);
  if (rp.a != 0) {
    if (rp.len != 0 || !RecvAll(fd, tag.data(), tag.size()) || !s->rx.Verify(tag)) {
      MarkDown(rank);
      return Status::Corruption(who + ": a reply failed its authentication tag");
    }
    Release(rank, std::move(s));
    return Status::FromErrno(who, static_cast<int>(rp.a));
  }
  if (rp.len != size) {
    MarkDown(rank);
    return Status::Corruption(who + " sent " + std::to_string(rp.len) + " bytes, expected " +
                              std::to_string(size));
  }
  // In pieces, so that a large file never sits in memory whole. The last piece goes to the
  // sink only once the tag has been checked: a file is never complete before it is proven.
  const size_t cap = static_cast<size_t>(std::min<uint64_t>(size, kFilePiece));
  std::unique_ptr<char[]> buf(new char[cap + wire::kTagLen]);  // not zero-filled
  for (uint64_t left = size;;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, cap));
    const bool last = n == left;
    if (!RecvAll(fd, buf.get(), n + (last ? wire::kTagLen : 0))) {
      MarkDown(rank);
      return Status::IOError(who + ": connection lost mid-transfer");
    }
    s->rx.Update(buf.get(), n);
    if (last) {
      std::memcpy(tag.data(), buf.get() + n, tag.size());
      if (!s->rx.Verify(tag)) {
        MarkDown(rank);
        return Status::Corruption(who + ": a reply failed its authentication tag");
      }
    }
    if (n) {
      Status st = sink(std::string_view(buf.get(), n));
      if (!st.ok()) return st;  // the rest of the reply is unread: the connection is dropped
    }
    left -= n;
    if (last) break;
  }
  Release(rank, std::move(s));
  return Status::OK();
}

Status PeerClient::FetchShard(uint32_t rank, uint32_t shard,
                              const std::function<std::optional<uint64_t>(uint32_t)>& size_of,
                              const std::function<bool(uint32_t, uint64_t, std::string_view)>& fn) {
  auto c = Connect(rank);
  if (!c.ok()) return c.status();
  std::unique_ptr<Session> s = std::move(c).value();
  const std::string who = Rank(rank);
  Header rq{wire::kMagic, wire::kGetShard, shard, 0, 0};
  s->tx.Begin(rq);
  wire::Tag tag = s->tx.Finish();
  struct iovec iov[2] = {{&rq, sizeof rq}, {tag.data(), tag.size()}};
  if (!SendIov(s->fd.get(), iov, 2)) {
    MarkDown(rank);
    return Status::IOError(who + ": connection lost");
  }
  auto fail = [&](Status st) {
    MarkDown(rank);
    return st;
  };
  // Headers and files are taken from one large buffer, refilled with whatever the socket has:
  // a few receives per megabyte instead of two or three per file.
  RecvBuffer in(s->fd.get());
  while (true) {
    Header rp;
    const char* hdr = in.Take(sizeof rp);
    if (hdr) std::memcpy(&rp, hdr, sizeof rp);
    if (!hdr || rp.magic != wire::kMagic || rp.op != wire::kGetShard)
      return fail(Status::IOError(who + ": connection lost during a shard transfer"));
    s->rx.Begin(rp);
    if (rp.b == wire::kEndOfShard) {
      const char* t = rp.len == 0 ? in.Take(wire::kTagLen) : nullptr;
      if (t) std::memcpy(tag.data(), t, tag.size());
      if (!t || !s->rx.Verify(tag))
        return fail(Status::Corruption(who + ": a reply failed its authentication tag"));
      // Nothing may follow the end marker; a stray byte means a confused peer.
      if (in.buffered() == 0) Release(rank, std::move(s));
      return rp.a == 0 ? Status::OK()
                       : Status::FromErrno(who + ": shard " + std::to_string(shard),
                                           static_cast<int>(rp.a));
    }
    const std::optional<uint64_t> expect = size_of(rp.b);
    if (rp.a != 0 || !expect || rp.len != *expect)
      return fail(Status::Corruption(who + " sent a file that is not in the shard"));
    // In pieces of at most 4 MiB, so that a large file never sits in memory whole; the last
    // piece is taken with the tag and handed on only once the tag is checked.
    uint64_t off = 0;
    do {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(rp.len - off, kShardPiece));
      const bool last = off + n == rp.len;
      const char* data = in.Take(n + (last ? wire::kTagLen : 0));
      if (!data) return fail(Status::IOError(who + ": connection lost mid-transfer"));
      s->rx.Update(data, n);
      if (last) {
        std::memcpy(tag.data(), data + n, tag.size());
        if (!s->rx.Verify(tag))
          return fail(Status::Corruption(who + ": a reply failed its authentication tag"));
      }
      if (!fn(rp.b, off, std::string_view(data, n)))
        return Status::Aborted("shard transfer stopped");  // connection dropped
      off += n;
    } while (off < rp.len);
  }
}

}  // namespace fanstore::agent
