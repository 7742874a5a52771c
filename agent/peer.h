// The peer data service: agents of one job fetch files from each other over TCP.
//
// Wire protocol (little-endian), one request then one reply per turn on a persistent
// connection:
//   request  PeerRequest  {magic, op, a, b, len} + len payload bytes
//   reply    PeerReply    {magic, op, status, 0, len} + len bytes
//   kAuth:  payload = a MUNGE credential made by the client. The server decodes it with the
//           local munged and accepts only the job's uid (its own). Nothing else is served on a
//           connection before a successful kAuth; a failed one closes it.
//   kGet:   a = shard, b = entry index within the shard's index. Reply: the raw file content
//           (sent with sendfile from the holder's staged copy), or status = errno.
//   kGetShard: a = shard. Replies, one per regular file of the shard, in index order:
//           {magic, op, 0, entry index, len} + content; then {magic, op, status, ~0u, 0} to
//           end (status 0, or errno when the stream stopped early). Bulk prefetch: one round
//           trip and large transfers instead of one request per file.
// The client always checks the XXH3 of what it receives against the index, so a peer can
// withhold data but never corrupt it.
//
// Threads: an epoll thread accepts and watches idle connections (EPOLLONESHOT); each ready
// request runs on a small pool, so a slow request never blocks others.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "stagein/thread_pool.h"

namespace fanstore::agent {

inline constexpr uint32_t kPeerMagic = 0x31505346;  // "FSP1"
enum PeerOp : uint32_t { kPeerAuth = 1, kPeerGet = 2, kPeerGetShard = 3 };
inline constexpr uint32_t kEndOfShard = 0xffffffffu;

struct PeerRequest {
  uint32_t magic, op, a, b, len;
};
struct PeerReply {
  uint32_t magic, op;
  int32_t status;
  uint32_t pad;
  uint64_t len;
};

// Resolves (shard, entry) to an open read-only descriptor of the staged file and its size;
// returns errno on failure.
using LocalFileFn = std::function<int(uint32_t shard, uint32_t entry, int* fd, uint64_t* size)>;
// The entry indexes of the regular files of a shard held here (empty when not held).
using ShardFilesFn = std::function<std::vector<uint32_t>(uint32_t shard)>;

class PeerServer {
 public:
  ~PeerServer() { Stop(); }
  // Listens on every IPv4 address, on an ephemeral port. `pool` runs the requests.
  Status Start(LocalFileFn local, ShardFilesFn shard_files, ThreadPool* pool);
  void Stop();
  // "addr1,addr2,...:port": this host's non-loopback IPv4 addresses (loopback if none).
  std::string Endpoint() const;  // "" before Start
  uint64_t refused() const { return refused_.load(); }

 private:
  void Loop();
  void ServeOne(int conn);
  void Rearm(int conn);
  void Drop(int conn);

  bool SendFile(int conn, uint32_t op, uint32_t entry, int fd, uint64_t size);

  LocalFileFn local_;
  ShardFilesFn shard_files_;
  ThreadPool* pool_ = nullptr;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  uint16_t port_ = 0;
  std::thread loop_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::unordered_map<int, bool> authed_;  // connection -> authenticated
  std::atomic<int> busy_{0};
  std::atomic<uint64_t> refused_{0};
};

// Connections to the other agents, kept open between requests.
class PeerClient {
 public:
  ~PeerClient();
  void SetEndpoints(std::vector<std::string> endpoints) { endpoints_ = std::move(endpoints); }
  // Streams the raw content of (shard, entry), `size` bytes, from agent `rank` to `sink` in
  // pieces of at most 1 MiB; an error from the sink stops the transfer. Transport errors mark
  // the peer down for a while, so later requests skip it at once.
  Status Fetch(uint32_t rank, uint32_t shard, uint32_t entry, uint64_t size,
               const std::function<Status(std::string_view)>& sink);
  // Streams every file of `shard` from agent `rank`; `fn` gets (entry, offset, piece) for
  // consecutive pieces of each file, in index order (a file of up to 4 MiB in one piece at
  // offset 0; an empty file as one empty piece), and may stop the stream by returning false.
  // `size_of(entry)` is what the peer must send for it.
  Status FetchShard(uint32_t rank, uint32_t shard, const std::function<uint64_t(uint32_t)>& size_of,
                    const std::function<bool(uint32_t, uint64_t, std::string_view)>& fn);
  bool IsDown(uint32_t rank);

 private:
  // An idle connection to `rank`, or a new authenticated one; failures mark the peer down.
  Result<int> Connect(uint32_t rank);
  Result<int> Dial(uint32_t rank);
  void Release(uint32_t rank, int fd);
  void MarkDown(uint32_t rank);

  std::vector<std::string> endpoints_;
  std::mutex mu_;
  std::unordered_map<uint32_t, std::vector<int>> idle_;
  std::unordered_map<uint32_t, std::chrono::steady_clock::time_point> down_until_;
};

// Makes a MUNGE credential for this process's uid ("" and an error when munged is not there).
Result<std::string> MungeCredential();
// Decodes a credential; returns the uid it certifies.
Result<uid_t> MungeVerify(const std::string& cred);

}  // namespace fanstore::agent
