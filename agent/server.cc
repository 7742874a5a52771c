// LocalServer.
#include "agent/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/log.h"

namespace fanstore::agent {

Status LocalServer::Start(const std::string& path, Handler handler) {
  handler_ = std::move(handler);
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return Status::InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.data(), path.size());
  listen_fd_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return Status::FromErrno("socket", errno);
  mode_t old = ::umask(0177);  // the socket file is born 0600
  int rc = ::bind(listen_fd_.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (rc != 0) return Status::FromErrno("bind " + path, errno);
  path_ = path;  // ours to unlink in Stop only once bound: a failed bind names another's socket
  if (::listen(listen_fd_.get(), 128) != 0) return Status::FromErrno("listen " + path, errno);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  wake_[0].Reset(wake[0]);
  wake_[1].Reset(wake[1]);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::OK();
}

void LocalServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_[1].valid()) {
    char c = 0;
    ssize_t ignored = ::write(wake_[1].get(), &c, 1);
    (void)ignored;
  }
  if (acceptor_.joinable()) acceptor_.join();
  // Connection threads poll the wake pipe too; wait for them (bounded).
  for (int i = 0; i < 500 && active_.load() > 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  listen_fd_.Reset();
  if (!path_.empty()) ::unlink(path_.c_str());
  // A connection thread still running polls the wake pipe: then it stays open for good.
  for (UniqueFD& fd : wake_) {
    if (active_.load() == 0)
      fd.Reset();
    else
      (void)fd.Release();
  }
}

void LocalServer::AcceptLoop() {
  while (!stopping_) {
    struct pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_[0].get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("local socket: poll: %s", std::strerror(errno));
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    UniqueFD conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::getuid()) {
      LOG_WARN("local socket: refused a connection from uid %d", static_cast<int>(cred.uid));
      continue;
    }
    // One thread per connection, up to a bound: a runaway client cannot exhaust the node's
    // threads (each process keeps at most 4 connections).
    if (active_.load() >= kMaxConnections) {
      LOG_WARN("local socket: %d connections open, refusing another", kMaxConnections);
      continue;
    }
    active_++;
    try {
      // Without a thread to be had the lambda, and with it the connection, is destroyed.
      std::thread([this, c = std::move(conn)]() mutable {
        Serve(c.get());
        c.Reset();  // before active_--: Stop closes the wake pipe once no thread is left
        active_--;
      }).detach();
    } catch (const std::system_error& e) {  // no thread to be had (ulimit -u, pids cgroup)
      LOG_WARN("local socket: %s; refusing a connection", e.what());
      active_--;
    }
  }
}

void LocalServer::Serve(int conn) {
  std::vector<char> buf(proto::kMaxPayload);
  while (!stopping_) {
    struct pollfd p[2] = {{conn, POLLIN, 0}, {wake_[0].get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    // A request arrives whole or the client is gone: bound the wait for the rest of a frame.
    struct timeval tv = {5, 0};
    ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    proto::Frame f;
    int passed = -1;
    if (proto::Recv(conn, &f, buf.data(), buf.size(), &passed) != 0) return;
    Reply r =
        handler_(static_cast<proto::Op>(f.op), std::string(buf.data(), f.len), UniqueFD(passed));
    const UniqueFD reply_fd(r.fd);  // ours to close once sent
    proto::Frame out{proto::kMagic, f.op, r.status, static_cast<uint32_t>(r.payload.size())};
    if (proto::Send(conn, out, r.payload.data(), reply_fd.get()) != 0) return;
  }
}

}  // namespace fanstore::agent
