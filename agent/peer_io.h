// Socket helpers shared by the peer service and its client (peer_server.cc, peer_client.cc):
// timed waits, whole sends and receives, endpoints. Internal to the agent.
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fanstore::agent::peer_io {

using Clock = std::chrono::steady_clock;

// Two retransmissions of a lost SYN (sent 1 s and 3 s after the first): a single lost packet
// must not mark a live peer down (at 1.5 s it did, on the 64-node test cluster).
constexpr int kConnectTimeoutMs = 3500;
constexpr int kIoTimeoutMs = 3000;  // per send or receive without progress, not per transfer
constexpr auto kDownFor = std::chrono::seconds(10);
constexpr size_t kShardPiece = 4u << 20;
constexpr size_t kFilePiece = 1u << 20;

// Milliseconds until `t`, 0 when past.
int MsLeft(Clock::time_point t);
// Waits until fd is ready for `events`, at most kIoTimeoutMs.
bool WaitFor(int fd, short events);
// Sends every byte of `iov` (modified). On the server's non-blocking sockets it waits while
// the socket is full, at most kIoTimeoutMs each time; client sockets block with SO_SNDTIMEO.
bool SendIov(int fd, struct iovec* iov, int n, int flags = 0);
bool SendAll(int fd, const void* buf, size_t len, int flags = 0);
// Client side: blocking receives on a socket with SO_RCVTIMEO (one system call per receive
// where a poll first would make it three; a timeout fails the receive).
bool RecvAll(int fd, void* buf, size_t len);

// Receives a stream into one growing buffer and hands out contiguous pieces of it. The
// storage is the thread's, kept for its life and never zero-filled: a stream per remote shard
// would otherwise allocate and clear 4 MiB each time, fresh pages on every shard of every peer.
// A second RecvBuffer alive on the same thread gets storage of its own.
class RecvBuffer {
 public:
  explicit RecvBuffer(int fd);
  ~RecvBuffer();
  RecvBuffer(const RecvBuffer&) = delete;
  RecvBuffer& operator=(const RecvBuffer&) = delete;
  // The next n bytes, valid until the next call; nullptr when the connection ends first.
  const char* Take(size_t n);

  size_t buffered() const { return end_ - pos_; }

 private:
  static constexpr size_t kMin = 4u << 20;
  struct Storage {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    bool in_use = false;
  };
  static Storage& ThreadStorage();
  int fd_;
  Storage own_;  // when the thread's is taken
  Storage* buf_;
  size_t pos_ = 0, end_ = 0;
};

std::string FormatEndpoint(const sockaddr_in& sa);
// "a.b.c.d:port" of either end of a connected socket.
std::string SocketEndpoint(int fd, bool peer);
void SetNoDelay(int fd);
// A client connection: blocking, with a bound on each wait.
void SetBlockingWithTimeouts(int fd);
// "peer N", for messages.
std::string Rank(uint32_t r);

}  // namespace fanstore::agent::peer_io
