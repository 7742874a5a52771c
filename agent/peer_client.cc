// The peer client: authenticated sessions to the other agents, pooled per rank, with fetches of
// files and whole shards.
#include "agent/peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
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
#include "common/log.h"
#include "common/unique_fd.h"

namespace fanstore::agent {

using peer_io::Clock;
using peer_io::kConnectTimeoutMs;
using peer_io::kDownFor;
using peer_io::kFilePiece;
using peer_io::kShardPiece;
using peer_io::Rank;
using peer_io::RecvAll;
using peer_io::RecvBuffer;
using peer_io::SendIov;
using peer_io::SetBlockingWithTimeouts;
using peer_io::SocketEndpoint;
using wire::Header;

// An exchange message is received a piece at a time, so that a header announcing more than
// the peer sends commits no more memory than it did send (and one piece).
constexpr uint64_t kMessagePiece = 64 << 20;

struct PeerClient::Session {
  UniqueFD fd;
  wire::Mac tx, rx;
  bool reused = false;  // taken from the idle sessions
};

namespace {

// What a session has pending now, without waiting: 0 when nothing (no byte, no end, no error),
// which is all an idle session may have; POLLNVAL when poll itself fails.
short Pending(int fd) {
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  const int n = ::poll(&p, 1, 0);
  return n < 0 ? POLLNVAL : n == 1 ? p.revents : 0;
}

}  // namespace

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
  idle_.remove_if([rank](const auto& e) { return e.first == rank; });
}

void PeerClient::Release(uint32_t rank, std::unique_ptr<Session> s) {
  std::lock_guard<std::mutex> l(mu_);
  // A peer marked down while this session was in use: the session closes with it.
  if (auto it = down_until_.find(rank); it != down_until_.end() && Clock::now() < it->second)
    return;
  idle_.emplace_front(rank, std::move(s));
  if (idle_.size() > kMaxIdle) idle_.pop_back();  // the least recently used one closes
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

Result<std::unique_ptr<PeerClient::Session>> PeerClient::Dial(uint32_t rank, bool fresh) {
  if (!fresh) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (it->first != rank) {
        ++it;
        continue;
      }
      auto s = std::move(it->second);
      it = idle_.erase(it);
      // An idle session has nothing to read: if it has (the end the server sent when it closed
      // the connection to make room for another), it is dropped, and the peer is not down.
      if (Pending(s->fd.get()) == 0) {
        s->reused = true;
        return s;
      }
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

Result<std::unique_ptr<PeerClient::Session>> PeerClient::Connect(uint32_t rank, bool fresh) {
  if (IsDown(rank)) return Status::IOError(Rank(rank) + " is marked down");
  auto s = Dial(rank, fresh);
  if (!s.ok()) {
    if (s.status().code() == Status::Code::kPermission)
      LOG_WARN("%s", s.status().ToString().c_str());
    MarkDown(rank);
  }
  return s;
}

bool PeerClient::SendRequest(Session& s, const Header& request) {
  Header rq = request;
  s.tx.Begin(rq);
  wire::Tag tag = s.tx.Finish();
  struct iovec iov[2] = {{&rq, sizeof rq}, {tag.data(), tag.size()}};
  return SendIov(s.fd.get(), iov, 2);
}

Status PeerClient::LostBeforeReply(uint32_t rank, const Session& s, bool* stale) {
  // A reused session that the peer closed (its end or a reset has arrived, where a stalled peer
  // sends nothing) is stale; anything else marks the peer down.
  *stale = s.reused && (Pending(s.fd.get()) & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  if (!*stale) MarkDown(rank);
  return Status::IOError(Rank(rank) + ": connection lost");
}

Status PeerClient::Fetch(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
                         const std::function<Status(std::string_view)>& sink) {
  return Retrying([&](bool fresh, bool* stale) {
    return FetchOnce(rank, shard, entry, size, sink, fresh, stale);
  });
}

Status PeerClient::FetchOnce(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
                             const std::function<Status(std::string_view)>& sink, bool fresh,
                             bool* stale) {
  auto c = Connect(rank, fresh);
  if (!c.ok()) return c.status();
  std::unique_ptr<Session> s = std::move(c).value();
  const int fd = s->fd.get();
  const std::string who = Rank(rank);
  wire::Tag tag;
  Header rp;
  if (!SendRequest(*s, {wire::kMagic, wire::kGet, shard, entry, 0}) || !RecvAll(fd, &rp, sizeof rp))
    return LostBeforeReply(rank, *s, stale);
  if (rp.magic != wire::kMagic || rp.op != wire::kGet || rp.b != entry) {
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
  return Retrying([&](bool fresh, bool* stale) {
    return FetchShardOnce(rank, shard, size_of, fn, fresh, stale);
  });
}

Status PeerClient::FetchShardOnce(
    uint32_t rank, uint32_t shard, const std::function<std::optional<uint64_t>(uint32_t)>& size_of,
    const std::function<bool(uint32_t, uint64_t, std::string_view)>& fn, bool fresh, bool* stale) {
  auto c = Connect(rank, fresh);
  if (!c.ok()) return c.status();
  std::unique_ptr<Session> s = std::move(c).value();
  const std::string who = Rank(rank);
  wire::Tag tag;
  auto fail = [&](Status st) {
    MarkDown(rank);
    return st;
  };
  if (!SendRequest(*s, {wire::kMagic, wire::kGetShard, shard, 0, 0}))
    return LostBeforeReply(rank, *s, stale);
  // Headers and files are taken from one large buffer, refilled with whatever the socket has:
  // a few receives per megabyte instead of two or three per file.
  RecvBuffer in(s->fd.get());
  for (bool first = true;; first = false) {
    Header rp;
    const char* hdr = in.Take(sizeof rp);
    if (!hdr && first) return LostBeforeReply(rank, *s, stale);
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

Status PeerClient::FetchMessages(uint32_t rank, uint32_t first, uint32_t count, uint32_t size,
                                 int wait_ms, const std::function<uint64_t(uint32_t)>& expect,
                                 const std::function<Status(uint32_t, std::string)>& fn) {
  if (size == 0 || count == 0 || count > size) return Status::InvalidArgument("bad message range");
  // Neither skips a peer marked down nor marks one: the gather asks again until its deadline
  // (a peer flooded with connections, or busy, may answer the next time).
  auto c = Dial(rank, false);
  if (!c.ok()) return c.status();
  std::unique_ptr<Session> s = std::move(c).value();
  const int fd = s->fd.get();
  const std::string who = Rank(rank);
  wire::Tag tag;
  if (!SendRequest(*s, {wire::kMagic, wire::kGetMessages, first, count, 0}))
    return Status::IOError(who + ": connection lost");
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t r = static_cast<uint32_t>((uint64_t{first} + i) % size);
    // The peer may still be gathering this one: wait for its first bytes longer than for the
    // rest, which the socket's own timeout bounds.
    struct pollfd p = {fd, POLLIN, 0};
    Header rp;
    if (::poll(&p, 1, wait_ms) != 1 || !RecvAll(fd, &rp, sizeof rp))
      return Status::IOError(who + ": no reply for the message of rank " + std::to_string(r));
    if (rp.magic != wire::kMagic || rp.op != wire::kGetMessages || rp.b != r ||
        (rp.a == 0 && rp.len != expect(r)) || (rp.a != 0 && rp.len != 0))
      return Status::Corruption(who + " sent a message that was not asked for");
    s->rx.Begin(rp);
    // The memory grows with the bytes that come, not with what the header announces.
    std::string m;
    for (uint64_t got = 0; got < rp.len;) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(rp.len - got, kMessagePiece));
      m.resize(static_cast<size_t>(got) + n);
      if (!RecvAll(fd, m.data() + got, n))
        return Status::IOError(who + ": connection lost mid-transfer");
      got += n;
    }
    if (!RecvAll(fd, tag.data(), tag.size()))
      return Status::IOError(who + ": connection lost mid-transfer");
    s->rx.Update(m.data(), m.size());
    if (!s->rx.Verify(tag))
      return Status::Corruption(who + ": a reply failed its authentication tag");
    if (rp.a != 0) {
      Release(rank, std::move(s));
      return Status::FromErrno(who + ": the message of rank " + std::to_string(r),
                               static_cast<int>(rp.a));
    }
    FS_RETURN_IF_ERROR(fn(r, std::move(m)));
  }
  Release(rank, std::move(s));
  return Status::OK();
}

}  // namespace fanstore::agent
