// The local protocol between clients (interceptor, `fanstore` tool) and the node's agent, over
// the agent's Unix stream socket (mode 0600 inside a 0700 directory).
//
// Every message is a fixed Frame followed by `len` payload bytes. A reply may carry one file
// descriptor as SCM_RIGHTS ancillary data. One request, one reply; connections may be reused.
//
//   request  kOpen:   payload = relative path of a regular file (canonical, as in the table)
//            reply:   status = 0 and one descriptor (O_RDONLY), or status = errno, no payload
//   request  kStatus: no payload; reply payload = JSON {"state": "staging|ready|failed", ...}
//   request  kStats:  no payload; reply payload = JSON counters
//                     payload kStatsSeries: the counters and "series", their samples over time
//            kServeView: one descriptor, of /dev/fuse, mounted by the SPANK plugin at the
//                     virtual path in a task's mount namespace (agent/kernel_view.h)
//                     reply: status = 0 once it is served, or errno and a message as payload
//
// Functions here never throw and never allocate on success paths beyond the caller's buffers,
// so the interceptor can use them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fanstore::proto {

inline constexpr uint32_t kMagic = 0x46534c31;  // "FSL1"
inline constexpr uint32_t kMaxPayload = 1u << 20;

enum Op : uint32_t { kOpen = 1, kStatus = 2, kStats = 3, kServeView = 4 };
// kStats's payload asking for the time series too (agents before it ignore the payload).
inline constexpr char kStatsSeries[] = "series";

struct Frame {
  uint32_t magic;
  uint32_t op;     // Op in requests; echoed in replies
  int32_t status;  // 0 or an errno value (replies)
  uint32_t len;    // payload bytes that follow
};

// Sends a frame, its payload and optionally one descriptor (fd >= 0). Returns 0 or -errno.
int Send(int sock, const Frame& f, const void* payload, int fd) noexcept;
// Receives a frame and up to `cap` payload bytes into buf; *fd receives a passed descriptor
// (or -1), which is closed instead on any failure. A payload longer than cap, a bad magic or
// EOF give -EPROTO / -ECONNRESET. fd == nullptr: a passed descriptor is dropped by the kernel.
int Recv(int sock, Frame* f, void* buf, size_t cap, int* fd) noexcept;
// Connects to the agent socket at `path`. With timeout_ms > 0, connect, every send and every
// receive on the socket wait at most that long (SO_SNDTIMEO/SO_RCVTIMEO; connect on a Unix
// socket with a full backlog honours SO_SNDTIMEO). Returns a descriptor or -errno.
int Connect(const char* path, int timeout_ms = 0) noexcept;

}  // namespace fanstore::proto
