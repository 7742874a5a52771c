// The interceptor's side of the local protocol: ask the node's agent to open a file that is
// not staged on this node, and receive a real descriptor for it.
#pragma once

#include <string_view>

namespace fanstore::interceptor {

// Connects to the agent at `socket_path`, sends kOpen for `rel` and waits at most timeout_ms
// (0: no limit) for each of connect, send and receive. Returns a descriptor (O_CLOEXEC set)
// or -errno: the agent's errno for the file, or -EIO when the agent cannot be reached, times
// out or breaks the protocol. Never throws, never allocates.
int AgentOpen(const char* socket_path, std::string_view rel, int timeout_ms) noexcept;

}  // namespace fanstore::interceptor
