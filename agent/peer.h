// The peer data service: agents of one job fetch files from each other over TCP.
//
// Messages, the handshake and message authentication are in agent/peer_wire.h. After the
// handshake, one request then its reply (or replies) per turn on a persistent connection:
//   kGet:      a = shard, b = entry index within the shard's index. Reply: a = status (0 or
//              errno), b = entry, len = the file's size, then its content.
//   kGetShard: a = shard. Replies, one per regular file of the shard, in index order, as for
//              kGet; then {a = status, b = kEndOfShard, len = 0} to end (status 0, or errno when
//              the stream stopped early). Bulk prefetch: one request, large transfers.
//   kGetMessages: a = first rank, b = count. The metadata exchange's messages of ranks first,
//              first + 1, ... (modulo the job's size), from an agent that has gathered them
//              (agent/gather.h). Replies, one per rank in that order: a = status (0, or errno
//              when the agent does not have it in time), b = rank, len = the message's size,
//              then the message. Served from the start of the exchange, before any file.
// Every message after the handshake carries its tag. The client also checks the XXH3 of what it
// receives against the index that came through PMIx.
//
// Threads: one epoll thread accepts, reads each request whole without blocking (so a slow
// client holds no thread), enforces the deadlines, and hands complete requests to a small pool.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace wire {
struct Header;
}

// Who this agent is, for the handshake: the job's key (wire::JobKey) and the agent's rank
// (and the job's size, for the exchange's messages).
struct PeerIdentity {
  std::string job;
  uint32_t rank = 0;
  uint32_t size = 0;  // agents in the job
};

// Resolves (shard, entry) to an open read-only descriptor of the staged file and its size;
// returns errno on failure.
using LocalFileFn = std::function<int(uint32_t shard, uint32_t entry, int* fd, uint64_t* size)>;
// The entry indexes of the regular files of a shard held here (empty when not held).
using ShardFilesFn = std::function<std::vector<uint32_t>(uint32_t shard)>;
// The exchange message of `rank`, waiting for it at most `wait_ms`; errno when it is not here
// (ETIMEDOUT: not yet; EINVAL: no such rank; ESHUTDOWN: the exchange is over).
using MessageFn =
    std::function<int(uint32_t rank, int wait_ms, std::shared_ptr<const std::string>* out)>;

// The IPv4 address the peer service listens on: `want` (an address or an interface name)
// when given; else the local address of the route to the job's launch node
// (SLURM_LAUNCH_NODE_IPADDR), the interface the job uses; else the first non-loopback
// address; else loopback.
Result<std::string> PeerListenAddress(const std::string& want);

class PeerServer {
 public:
  // Limits against a flood of connections that never authenticate: at most 64 at once (a new
  // one closes the oldest of them that is not being answered). Past kMaxConnections authenticated
  // ones, the one idle the longest closes (its client dials again when it next needs this node), so
  // that at thousands of nodes a reader is not turned away because others keep sessions they do not
  // use; only when none has been idle for a second are newcomers refused.
  static constexpr int kMaxUnauthenticated = 64;
  static constexpr int kMaxConnections = 512;
  static constexpr int kHandshakeMs = 5000;  // from accept to the end of the handshake
  static constexpr int kRequestMs = 10000;   // from a request's first byte to its last
  // Whole-shard streams served at once, on a pool of their own: however many clients stream,
  // single-file requests and handshakes keep the main pool.
  static constexpr int kStreamThreads = 4;
  // Handshakes, which anyone who can connect may start and which each cost a MUNGE credential,
  // run on a small pool of the server's own: a flood of hellos delays other handshakes, never
  // the files served to the job's authenticated peers.
  static constexpr int kHandshakeThreads = 2;

  PeerServer();
  ~PeerServer();
  // Listens on `addr`, on an ephemeral port. `pool` runs the requests, `streams` the
  // whole-shard streams (default: `pool`); the handshakes have a pool of their own.
  // `messages` serves kGetMessages (none: refused).
  Status Start(const std::string& addr, PeerIdentity me, LocalFileFn local,
               ShardFilesFn shard_files, ThreadPool* pool, ThreadPool* streams = nullptr,
               MessageFn messages = nullptr);
  // How long a kGetMessages request waits for each message the agent has not gathered yet.
  static constexpr int kMessageWaitMs = 60000;
  void Stop();
  std::string Endpoint() const;  // "addr:port"; "" before Start
  uint64_t refused() const { return refused_.load(); }
  uint64_t evicted() const { return evicted_.load(); }  // idle connections closed for new ones
  void SetMaxConnectionsForTest(int n) { max_conns_ = n; }

 private:
  struct Conn;
  void Loop();
  void Accept();
  void OnReadable(int fd);
  int NextTimeoutMs();
  void Serve(Conn* c);
  bool Handshake(Conn* c);
  bool Request(Conn* c);
  void Refuse(Conn* c, const std::string& why);
  void Rearm(Conn* c);
  void Drop(int fd);
  template <typename Want, typename Key>
  bool DropOldestLocked(Want want, Key key);  // mu_ held
  bool DropUnauthenticatedLocked();           // mu_ held
  void EvictIdle();
  bool SendFile(Conn* c, uint32_t op, uint32_t entry, int fd, uint64_t size);
  bool SendMessages(Conn* c, uint32_t first, uint32_t count);

  PeerIdentity me_;
  LocalFileFn local_;
  ShardFilesFn shard_files_;
  MessageFn messages_;
  ThreadPool* pool_ = nullptr;
  ThreadPool* streams_ = nullptr;
  std::unique_ptr<ThreadPool> handshakes_;
  std::string addr_;
  UniqueFD listen_fd_, epoll_fd_, wake_fd_;
  uint16_t port_ = 0;
  bool accept_paused_ = false;
  std::chrono::steady_clock::time_point accept_resume_;
  std::thread loop_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::atomic<int> busy_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> evicted_{0};
  std::atomic<int> max_conns_{kMaxConnections};
};

// Connections to the other agents, kept open between requests.
class PeerClient {
 public:
  PeerClient();
  ~PeerClient();
  void SetIdentity(PeerIdentity me) { me_ = std::move(me); }
  void SetEndpoints(std::vector<std::string> endpoints) { endpoints_ = std::move(endpoints); }
  // Streams the raw content of (shard, entry), `size` bytes, from agent `rank` to `sink` in
  // pieces of at most 1 MiB; an error from the sink stops the transfer. Transport errors mark
  // the peer down for a while, so later requests skip it at once.
  Status Fetch(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
               const std::function<Status(std::string_view)>& sink);
  // Streams every file of `shard` from agent `rank`; `fn` gets (entry, offset, piece) for
  // consecutive pieces of each file, in index order (a file of up to 4 MiB in one piece at
  // offset 0; an empty file as one empty piece), and may stop the stream by returning false.
  // `size_of(entry)` is what the peer must send for it, or nullopt when the entry is not one
  // the shard's stream may hold.
  Status FetchShard(uint32_t rank, uint32_t shard,
                    const std::function<std::optional<uint64_t>(uint32_t)>& size_of,
                    const std::function<bool(uint32_t, uint64_t, std::string_view)>& fn);
  // The exchange messages of ranks first, first + 1, ... (count of them, modulo `size`) from
  // agent `rank`; `expect(r)` is the size rank r's message must have (as its pointer says).
  // `fn(r, message)` gets each whole and authenticated, and may refuse it (an error ends the
  // transfer). The first bytes of each may take up to `wait_ms` (the peer may still be
  // gathering them).
  Status FetchMessages(uint32_t rank, uint32_t first, uint32_t count, uint32_t size, int wait_ms,
                       const std::function<uint64_t(uint32_t)>& expect,
                       const std::function<Status(uint32_t, std::string)>& fn);
  bool IsDown(uint32_t rank);

 private:
  struct Session;
  // An idle connection to `rank` (unless `fresh`), or a new authenticated one; failures mark
  // the peer down.
  Result<std::unique_ptr<Session>> Connect(uint32_t rank, bool fresh = false);
  Result<std::unique_ptr<Session>> Dial(uint32_t rank, bool fresh);
  // A request on an idle session that the peer closed meanwhile (at its connection cap it
  // closes the one idle the longest) fails before any byte of the reply, and sets *stale
  // instead of marking the peer down: the request then goes once more, on a new connection.
  template <typename Once>
  Status Retrying(Once once) {
    bool stale = false;
    Status st = once(false, &stale);
    return stale ? once(true, &stale) : st;
  }
  // The request or the reply's header was lost, before any byte of the reply: *stale (see
  // above), or the peer is marked down.
  Status LostBeforeReply(uint32_t rank, const Session& s, bool* stale);
  Status FetchOnce(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
                   const std::function<Status(std::string_view)>& sink, bool fresh, bool* stale);
  Status FetchShardOnce(uint32_t rank, uint32_t shard,
                        const std::function<std::optional<uint64_t>(uint32_t)>& size_of,
                        const std::function<bool(uint32_t, uint64_t, std::string_view)>& fn,
                        bool fresh, bool* stale);
  Status Handshake(Session* s, uint32_t rank);
  // Sends request `rq` (no payload) on the session, tagged; false when the send failed.
  bool SendRequest(Session& s, const wire::Header& rq);
  void Release(uint32_t rank, std::unique_ptr<Session> s);
  void MarkDown(uint32_t rank);

  PeerIdentity me_;
  std::vector<std::string> endpoints_;
  std::mutex mu_;
  // Idle connections, the most recently used first, at most kMaxIdle of them over all peers: an
  // agent that read from every other node would otherwise keep a connection to each, and every
  // holder one from each reader (O(N) descriptors per agent, beyond PeerServer::kMaxConnections
  // at 512 nodes; docs/benchmarks.md, scale-out).
  static constexpr size_t kMaxIdle = 32;
  std::list<std::pair<uint32_t, std::unique_ptr<Session>>> idle_;
  std::unordered_map<uint32_t, std::chrono::steady_clock::time_point> down_until_;
};

// A MUNGE credential for this process's uid carrying `payload`, decodable by this uid only
// (an error when munged is not there).
Result<std::string> MungeCredential(const std::string& payload);
struct MungeDecoded {
  uid_t uid;
  std::string payload;
};
// Decodes a credential: the uid it certifies and its payload.
Result<MungeDecoded> MungeVerify(const std::string& cred);

}  // namespace fanstore::agent
