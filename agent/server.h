// The agent's local service: a Unix stream socket (mode 0600, in the job's 0700 run directory)
// serving the protocol of common/proto.h. One thread per connection, so a slow request (a file
// fetched from a peer) never blocks another client, and a client that dies mid-request only
// ends its own thread. Connections from another uid are refused (SO_PEERCRED).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/proto.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore::agent {

struct Reply {
  int status = 0;  // 0 or an errno value
  std::string payload;
  int fd = -1;  // sent with SCM_RIGHTS and then closed by the server
};

// `passed`: the descriptor the request carried (kServeView), if any.
using Handler = std::function<Reply(proto::Op op, const std::string& payload, UniqueFD passed)>;

class LocalServer {
 public:
  static constexpr int kMaxConnections = 1024;  // connection threads at once
  ~LocalServer() { Stop(); }
  // Binds `path` (which must not exist) and starts accepting.
  Status Start(const std::string& path, Handler handler);
  // Stops accepting, wakes every connection, joins, and unlinks the socket.
  void Stop();

 private:
  void AcceptLoop();
  void Serve(int conn);

  std::string path_;
  Handler handler_;
  UniqueFD listen_fd_;
  UniqueFD wake_[2];  // [0] polled by every thread, [1] written once by Stop
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::atomic<int> active_{0};
};

}  // namespace fanstore::agent
