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
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

constexpr int kConnectTimeoutMs = 1500;
constexpr int kIoTimeoutSec = 3;  // per recv/send without progress, not per transfer
constexpr auto kDownFor = std::chrono::seconds(10);
constexpr uint32_t kMaxCred = 4096;
constexpr size_t kShardPiece = 4u << 20;

bool SendAll(int fd, const void* buf, size_t len, int flags = 0) {
  const char* p = static_cast<const char*>(buf);
  while (len) {
    ssize_t w = ::send(fd, p, len, MSG_NOSIGNAL | flags);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    len -= static_cast<size_t>(w);
  }
  return true;
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

void SetIoTimeouts(int fd) {
  struct timeval tv = {kIoTimeoutSec, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Result<std::string> MungeCredential() {
  char* cred = nullptr;
  munge_err_t e = munge_encode(&cred, nullptr, nullptr, 0);
  if (e != EMUNGE_SUCCESS) return Status::Permission(std::string("munge: ") + munge_strerror(e));
  std::string out(cred);
  std::free(cred);
  return out;
}

Result<uid_t> MungeVerify(const std::string& cred) {
  uid_t uid;
  gid_t gid;
  munge_err_t e = munge_decode(cred.c_str(), nullptr, nullptr, nullptr, &uid, &gid);
  if (e != EMUNGE_SUCCESS) return Status::Permission(std::string("munge: ") + munge_strerror(e));
  return uid;
}

// --- server ----------------------------------------------------------------------------------

Status PeerServer::Start(LocalFileFn local, ShardFilesFn shard_files, ThreadPool* pool) {
  local_ = std::move(local);
  shard_files_ = std::move(shard_files);
  pool_ = pool;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::FromErrno("peer service: socket", errno);
  struct sockaddr_in addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 256) != 0)
    return Status::FromErrno("peer service: bind/listen", errno);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Status::FromErrno("peer service: epoll", errno);
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  loop_ = std::thread([this] { Loop(); });
  return Status::OK();
}

std::string PeerServer::Endpoint() const {
  if (port_ == 0) return "";
  std::vector<std::string> outer, loop;
  struct ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      (i->ifa_flags & IFF_LOOPBACK ? loop : outer).push_back(buf);
    }
    ::freeifaddrs(ifs);
  }
  // Loopback only when the node has nothing else (it would reach the caller's own node).
  std::string s;
  for (auto& a : outer.empty() ? loop : outer) s += (s.empty() ? "" : ",") + a;
  if (s.empty()) s = "127.0.0.1";
  return s + ":" + std::to_string(port_);
}

void PeerServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
    (void)ignored;
  }
  if (loop_.joinable()) loop_.join();
  for (int i = 0; i < 300 && busy_.load() > 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [fd, a] : authed_) ::close(fd);
  authed_.clear();
  for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_})
    if (*fd >= 0) ::close(*fd), *fd = -1;
}

void PeerServer::Loop() {
  struct epoll_event evs[64];
  while (!stopping_) {
    int n = ::epoll_wait(epoll_fd_, evs, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == wake_fd_) return;
      if (fd == listen_fd_) {
        int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        SetIoTimeouts(conn);
        {
          std::lock_guard<std::mutex> l(mu_);
          authed_[conn] = false;
        }
        struct epoll_event ev = {};
        ev.events = EPOLLIN | EPOLLONESHOT | EPOLLRDHUP;
        ev.data.fd = conn;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conn, &ev);
        continue;
      }
      busy_++;
      pool_->Submit([this, fd] {
        ServeOne(fd);
        busy_--;
      });
    }
  }
}

void PeerServer::Rearm(int conn) {
  struct epoll_event ev = {};
  ev.events = EPOLLIN | EPOLLONESHOT | EPOLLRDHUP;
  ev.data.fd = conn;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn, &ev) != 0) Drop(conn);
}

void PeerServer::Drop(int conn) {
  std::lock_guard<std::mutex> l(mu_);
  if (authed_.erase(conn)) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn, nullptr);
    ::close(conn);
  }
}

void PeerServer::ServeOne(int conn) {
  if (stopping_) return;
  PeerRequest rq;
  if (!RecvAll(conn, &rq, sizeof rq) || rq.magic != kPeerMagic) return Drop(conn);
  bool authed;
  {
    std::lock_guard<std::mutex> l(mu_);
    authed = authed_[conn];
  }
  PeerReply rp{kPeerMagic, rq.op, 0, 0, 0};
  if (rq.op == kPeerAuth) {
    std::string cred(rq.len, '\0');
    if (rq.len > kMaxCred || !RecvAll(conn, cred.data(), cred.size())) return Drop(conn);
    auto uid = MungeVerify(cred);
    if (!uid.ok() || *uid != ::getuid()) {
      refused_++;
      LOG_WARN("peer service: refused a connection: %s",
               uid.ok() ? ("credential of uid " + std::to_string(*uid) + ", not the job's").c_str() : uid.status().ToString().c_str());
      rp.status = EACCES;
      SendAll(conn, &rp, sizeof rp);
      return Drop(conn);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      authed_[conn] = true;
    }
    if (!SendAll(conn, &rp, sizeof rp)) return Drop(conn);
    return Rearm(conn);
  }
  if (!authed || (rq.op != kPeerGet && rq.op != kPeerGetShard) || rq.len != 0) {
    refused_++;
    return Drop(conn);
  }
  if (rq.op == kPeerGetShard) {
    int status = 0;
    for (uint32_t entry : shard_files_(rq.a)) {
      int fd = -1;
      uint64_t size = 0;
      status = local_(rq.a, entry, &fd, &size);
      if (status != 0) break;
      if (!SendFile(conn, kPeerGetShard, entry, fd, size)) return Drop(conn);
    }
    PeerReply end{kPeerMagic, kPeerGetShard, status, kEndOfShard, 0};
    if (!SendAll(conn, &end, sizeof end)) return Drop(conn);
    return Rearm(conn);
  }
  int fd = -1;
  uint64_t size = 0;
  rp.status = local_(rq.a, rq.b, &fd, &size);
  if (rp.status != 0) {
    if (!SendAll(conn, &rp, sizeof rp)) return Drop(conn);
    return Rearm(conn);
  }
  if (!SendFile(conn, kPeerGet, rq.b, fd, size)) return Drop(conn);
  Rearm(conn);
}

// Sends a reply header and the file's content; takes ownership of fd.
bool PeerServer::SendFile(int conn, uint32_t op, uint32_t entry, int fd, uint64_t size) {
  UniqueFD file(fd);
  PeerReply rp{kPeerMagic, op, 0, entry, size};
  // MSG_MORE: the header goes out with the first bytes of the file, not as a packet of its own.
  if (!SendAll(conn, &rp, sizeof rp, size ? MSG_MORE : 0)) return false;
  off_t off = 0;
  while (static_cast<uint64_t>(off) < size) {
    ssize_t w = ::sendfile(conn, file.get(), &off, size - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
  }
  return true;
}

// --- client ----------------------------------------------------------------------------------

PeerClient::~PeerClient() {
  for (auto& [r, v] : idle_)
    for (int fd : v) ::close(fd);
}

bool PeerClient::IsDown(uint32_t rank) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = down_until_.find(rank);
  return it != down_until_.end() && std::chrono::steady_clock::now() < it->second;
}

void PeerClient::MarkDown(uint32_t rank) {
  std::lock_guard<std::mutex> l(mu_);
  down_until_[rank] = std::chrono::steady_clock::now() + kDownFor;
  for (int fd : idle_[rank]) ::close(fd);
  idle_[rank].clear();
}

void PeerClient::Release(uint32_t rank, int fd) {
  std::lock_guard<std::mutex> l(mu_);
  idle_[rank].push_back(fd);
}

Result<int> PeerClient::Dial(uint32_t rank) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& v = idle_[rank];
    if (!v.empty()) {
      int fd = v.back();
      v.pop_back();
      return fd;
    }
  }
  if (rank >= endpoints_.size() || endpoints_[rank].empty()) return Status::NotFound("no endpoint for rank " + std::to_string(rank));
  const std::string& ep = endpoints_[rank];
  size_t colon = ep.rfind(':');
  int port = std::atoi(ep.c_str() + colon + 1);
  std::string addrs = ep.substr(0, colon);
  Status last = Status::IOError("no address");
  size_t start = 0;
  while (start <= addrs.size()) {
    size_t comma = addrs.find(',', start);
    std::string a = addrs.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? addrs.size() + 1 : comma + 1;
    struct sockaddr_in sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, a.c_str(), &sa.sin_addr) != 1) continue;
    UniqueFD fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return Status::FromErrno("socket", errno);
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd p = {fd.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, kConnectTimeoutMs) == 1 ? 0 : -1;
      int err = 0;
      socklen_t len = sizeof err;
      if (rc == 0) ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (rc != 0 || err != 0) {
        last = Status::IOError("connect " + a + ":" + std::to_string(port) + ": " + (rc ? "timed out" : std::strerror(err)));
        continue;
      }
    } else if (rc != 0) {
      last = Status::FromErrno("connect " + a, errno);
      continue;
    }
    ::fcntl(fd.get(), F_SETFL, 0);  // blocking, with timeouts
    SetIoTimeouts(fd.get());
    auto cred = MungeCredential();
    if (!cred.ok()) return cred.status();
    PeerRequest rq{kPeerMagic, kPeerAuth, 0, 0, static_cast<uint32_t>(cred->size())};
    PeerReply rp;
    if (!SendAll(fd.get(), &rq, sizeof rq) || !SendAll(fd.get(), cred->data(), cred->size()) ||
        !RecvAll(fd.get(), &rp, sizeof rp) || rp.magic != kPeerMagic)
      return Status::IOError("peer " + std::to_string(rank) + ": authentication failed");
    if (rp.status != 0) return Status::Permission("peer " + std::to_string(rank) + " refused our credential");
    return fd.Release();
  }
  return last;
}

Result<int> PeerClient::Connect(uint32_t rank) {
  if (IsDown(rank)) return Status::IOError("peer " + std::to_string(rank) + " is marked down");
  auto fd = Dial(rank);
  if (!fd.ok()) MarkDown(rank);
  return fd;
}

Status PeerClient::Fetch(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
                         const std::function<Status(std::string_view)>& sink) {
  auto fd = Connect(rank);
  if (!fd.ok()) return fd.status();
  UniqueFD conn(*fd);
  const std::string who = "peer " + std::to_string(rank);
  PeerRequest rq{kPeerMagic, kPeerGet, shard, entry, 0};
  PeerReply rp;
  if (!SendAll(conn.get(), &rq, sizeof rq) || !RecvAll(conn.get(), &rp, sizeof rp) || rp.magic != kPeerMagic) {
    MarkDown(rank);
    return Status::IOError(who + ": connection lost");
  }
  if (rp.status != 0) {
    Release(rank, conn.Release());
    return Status::FromErrno(who, rp.status);
  }
  if (rp.len != size) {
    MarkDown(rank);
    return Status::Corruption(who + " sent " + std::to_string(rp.len) + " bytes, expected " + std::to_string(size));
  }
  // In pieces, so that a large file never sits in memory whole.
  const size_t cap = static_cast<size_t>(std::min<uint64_t>(size, 1u << 20));
  std::unique_ptr<char[]> buf(new char[cap ? cap : 1]);  // not zero-filled
  for (uint64_t left = size; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, cap));
    if (!RecvAll(conn.get(), buf.get(), n)) {
      MarkDown(rank);
      return Status::IOError(who + ": connection lost mid-transfer");
    }
    Status st = sink(std::string_view(buf.get(), n));
    if (!st.ok()) return st;  // the rest of the reply is unread: the connection is dropped
    left -= n;
  }
  Release(rank, conn.Release());
  return Status::OK();
}

Status PeerClient::FetchShard(uint32_t rank, uint32_t shard, const std::function<uint64_t(uint32_t)>& size_of,
                              const std::function<bool(uint32_t, uint64_t, std::string_view)>& fn) {
  auto fd = Connect(rank);
  if (!fd.ok()) return fd.status();
  UniqueFD conn(*fd);
  const std::string who = "peer " + std::to_string(rank);
  PeerRequest rq{kPeerMagic, kPeerGetShard, shard, 0, 0};
  if (!SendAll(conn.get(), &rq, sizeof rq)) {
    MarkDown(rank);
    return Status::IOError(who + ": connection lost");
  }
  // Headers and files are taken from one large buffer, refilled with whatever the socket has:
  // a few receives per megabyte instead of two or three per file.
  RecvBuffer in(conn.get());
  while (true) {
    PeerReply rp;
    const char* hdr = in.Take(sizeof rp);
    if (hdr) std::memcpy(&rp, hdr, sizeof rp);
    if (!hdr || rp.magic != kPeerMagic || rp.op != kPeerGetShard) {
      MarkDown(rank);
      return Status::IOError(who + ": connection lost during a shard transfer");
    }
    if (rp.pad == kEndOfShard) {
      // Nothing may follow the end marker; a stray byte means a confused peer.
      if (in.buffered() == 0) Release(rank, conn.Release());
      return rp.status == 0 ? Status::OK() : Status::FromErrno(who + ": shard " + std::to_string(shard), rp.status);
    }
    if (rp.len != size_of(rp.pad)) {
      MarkDown(rank);
      return Status::Corruption(who + " sent a file of the wrong size");
    }
    // In pieces of at most 4 MiB, so that a large file never sits in memory whole.
    uint64_t off = 0;
    do {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(rp.len - off, kShardPiece));
      const char* data = in.Take(n);
      if (!data) {
        MarkDown(rank);
        return Status::IOError(who + ": connection lost mid-transfer");
      }
      if (!fn(rp.pad, off, std::string_view(data, n))) return Status::Aborted("shard transfer stopped");  // connection dropped
      off += n;
    } while (off < rp.len);
  }
}

}  // namespace fanstore::agent
