// The peer service and client over loopback, with the node's real munged: the handshake binds
// job, ranks, nonces and endpoints; lengths are checked before allocation; slow and flooding
// clients hold no thread; a relay between client and server is refused.
#include "agent/peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <thread>

#include "agent/peer_wire.h"
#include "agent/testing.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

using namespace std::chrono_literals;

using testing::MungeWorks;

// The file served for (shard, entry): its content is a pattern of its own, `entry * 1000` bytes.
std::string Content(uint32_t shard, uint32_t entry) {
  std::string s(entry * 1000, '\0');
  for (size_t i = 0; i < s.size(); i++)
    s[i] = static_cast<char>('a' + (i * 7 + shard + entry) % 26);
  return s;
}

class PeerTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"peer-test"};
  static void SetUpTestSuite() { (void)testing::StartMunged(); }
  void SetUp() override {
    if (!MungeWorks()) GTEST_SKIP() << "munged is not running";
    dir_ = tmp_.path();
    for (uint32_t e = 0; e < 8; e++) {
      std::string p = dir_ + "/" + std::to_string(e);
      UniqueFD fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
      std::string c = Content(0, e);
      ASSERT_EQ(::write(fd.get(), c.data(), c.size()), static_cast<ssize_t>(c.size()));
    }
  }
  void TearDown() override { server_.reset(); }
  // A server of rank `rank` of job `job` on loopback.
  void StartServer(const std::string& job = "job-a", uint32_t rank = 1) {
    server_ = std::make_unique<PeerServer>();
    ASSERT_TRUE(
        server_
            ->Start(
                "127.0.0.1", PeerIdentity{job, rank},
                [this](uint32_t s, uint32_t e, int* fd, uint64_t* n) {
                  if (s != 0 || e >= 8) return ENOENT;
                  *fd = ::open((dir_ + "/" + std::to_string(e)).c_str(), O_RDONLY | O_CLOEXEC);
                  *n = Content(s, e).size();
                  return 0;
                },
                [](uint32_t s) {
                  return s == 0 ? std::vector<uint32_t>{1, 2, 3, 0, 7} : std::vector<uint32_t>{};
                },
                &pool_)
            .ok());
  }
  // A client of rank 0 that knows rank 1 at `endpoint`.
  std::unique_ptr<PeerClient> Client(const std::string& job = "job-a", std::string endpoint = "") {
    auto c = std::make_unique<PeerClient>();
    c->SetIdentity(PeerIdentity{job, 0});
    c->SetEndpoints({"", endpoint.empty() ? server_->Endpoint() : endpoint});
    return c;
  }
  static Status FetchInto(PeerClient& c, uint32_t entry, std::string* out) {
    out->clear();
    return c.Fetch(1, 0, entry, Content(0, entry).size(), [&](std::string_view p) {
      out->append(p);
      return Status::OK();
    });
  }

 public:
  static UniqueFD Raw(const std::string& endpoint) { return testing::ConnectRaw(endpoint); }

 protected:
  // Bytes the server sends before it closes the connection (or `ms` of silence).
  static std::string Drain(int fd, int ms = 3000) {
    std::string out;
    char buf[4096];
    struct pollfd p = {fd, POLLIN, 0};
    while (::poll(&p, 1, ms) == 1) {
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r <= 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    return out;
  }

  std::string dir_;
  ThreadPool pool_{4};
  std::unique_ptr<PeerServer> server_;
};

TEST_F(PeerTest, FetchesFilesAndShardsOverAnAuthenticatedSession) {
  StartServer();
  auto c = Client();
  std::string got;
  for (uint32_t e : {3u, 0u, 7u, 3u}) {  // the connection is kept and reused
    ASSERT_TRUE(FetchInto(*c, e, &got).ok());
    EXPECT_EQ(got, Content(0, e));
  }
  EXPECT_EQ(FetchInto(*c, 9, &got).code(),
            Status::Code::kNotFound);  // ENOENT, and the session goes on
  ASSERT_TRUE(FetchInto(*c, 2, &got).ok());
  std::map<uint32_t, std::string> files;
  Status st = c->FetchShard(
      1, 0,
      [](uint32_t e) -> std::optional<uint64_t> {
        return e < 8 ? std::optional<uint64_t>(Content(0, e).size()) : std::nullopt;
      },
      [&](uint32_t e, uint64_t off, std::string_view piece) {
        EXPECT_EQ(off, files[e].size());
        files[e].append(piece);
        return true;
      });
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(files.size(), 5u);
  for (auto& [e, content] : files) EXPECT_EQ(content, Content(0, e));
  EXPECT_EQ(server_->refused(), 0u);
}

TEST_F(PeerTest, AnEntryOutsideTheShardIsRefusedNotIndexed) {
  StartServer();
  auto c = Client();
  // F9: the stream names entries the client does not know; the client must not look them up.
  Status st = c->FetchShard(
      1, 0,
      [](uint32_t e) -> std::optional<uint64_t> {
        return e == 1 ? std::optional<uint64_t>(1000) : std::nullopt;
      },
      [&](uint32_t, uint64_t, std::string_view) { return true; });
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
}

TEST_F(PeerTest, AnotherJobOrRankIsRefusedBeforeAnyCredentialIsSent) {
  StartServer("job-a", 1);
  std::string got;
  // A server of another job (same user): the client refuses its proof.
  auto other_job = Client("job-b");
  Status st = FetchInto(*other_job, 1, &got);
  EXPECT_EQ(st.code(), Status::Code::kPermission) << st.ToString();
  EXPECT_NE(st.ToString().find("job"), std::string::npos) << st.ToString();
  EXPECT_TRUE(got.empty());
  // A server that is not the rank dialled (an agent on a dead agent's endpoint).
  PeerServer rank2;
  ASSERT_TRUE(rank2
                  .Start(
                      "127.0.0.1", PeerIdentity{"job-a", 2},
                      [](uint32_t, uint32_t, int*, uint64_t*) { return ENOENT; },
                      [](uint32_t) { return std::vector<uint32_t>{}; }, &pool_)
                  .ok());
  auto wrong = Client("job-a", rank2.Endpoint());
  st = FetchInto(*wrong, 1, &got);
  EXPECT_EQ(st.code(), Status::Code::kPermission) << st.ToString();
  EXPECT_TRUE(wrong->IsDown(1));
}

TEST_F(PeerTest, HostileLengthsAndEarlyRequestsAreDroppedWithoutAllocating) {
  StartServer();
  // F2: an unauthenticated 4 GiB length.
  for (auto h : {wire::Header{wire::kMagic, wire::kHello, 0, 1, 0xffffffffull},
                 wire::Header{wire::kMagic, wire::kAuth, 0, 1, 0x100000000ull},
                 wire::Header{wire::kMagic, wire::kGet, 0, 1, 0},  // a request before the handshake
                 wire::Header{wire::kMagic, wire::kGetShard, 0, 0, 0},     // a stream, likewise
                 wire::Header{wire::kMagic, wire::kGetMessages, 0, 1, 0},  // the exchange's
                 wire::Header{0x31505346, 1, 0, 0, 200}}) {  // the old protocol's kAuth
    UniqueFD fd = Raw(server_->Endpoint());
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::send(fd.get(), &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
    EXPECT_EQ(Drain(fd.get()), "");  // closed, nothing sent
  }
  EXPECT_EQ(server_->refused(), 6u);
  auto c = Client();
  std::string got;
  EXPECT_TRUE(FetchInto(*c, 5, &got).ok());  // still serving
}

TEST_F(PeerTest, AForeignCredentialIsRefused) {
  StartServer();
  UniqueFD fd = Raw(server_->Endpoint());
  wire::Header hello{wire::kMagic, wire::kHello, 0, 1, wire::kNonceLen};
  std::string msg(reinterpret_cast<const char*>(&hello), sizeof hello);
  msg += std::string(wire::kNonceLen, 'n');
  ASSERT_EQ(::send(fd.get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  wire::Header rp;
  ASSERT_EQ(::recv(fd.get(), &rp, sizeof rp, MSG_WAITALL), static_cast<ssize_t>(sizeof rp));
  std::string cred(rp.len, '\0');
  ASSERT_EQ(::recv(fd.get(), cred.data(), cred.size(), MSG_WAITALL),
            static_cast<ssize_t>(cred.size()));
  // A credential of the right uid but without our binding (as `munge -n` makes).
  auto own = MungeCredential("not a binding");
  ASSERT_TRUE(own.ok());
  wire::Header auth{wire::kMagic, wire::kAuth, 0, 1, own->size()};
  msg.assign(reinterpret_cast<const char*>(&auth), sizeof auth);
  msg += *own;
  ASSERT_EQ(::send(fd.get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  const std::string reply = Drain(fd.get());
  ASSERT_EQ(reply.size(), sizeof(wire::Header));  // a refusal, then the end
  std::memcpy(&rp, reply.data(), sizeof rp);
  EXPECT_EQ(rp.a, static_cast<uint32_t>(EACCES));
  EXPECT_EQ(server_->refused(), 1u);
}

TEST_F(PeerTest, SlowAndFloodingClientsHoldNoThreadAndTimeOut) {
  StartServer();
  // F3, F10: more half-open connections than the cap, each one byte into its hello.
  std::vector<UniqueFD> slow;
  for (int i = 0; i < PeerServer::kMaxUnauthenticated + 20; i++) {
    slow.push_back(Raw(server_->Endpoint()));
    ASSERT_TRUE(slow.back().valid());
    ASSERT_EQ(::send(slow.back().get(), "F", 1, 0), 1);
  }
  // The job's own client gets in at once, the oldest of them making room (before, it waited
  // for their deadlines), and no serving thread waited on them meanwhile.
  const auto t0 = std::chrono::steady_clock::now();
  auto c = Client();
  std::string got;
  Status st = FetchInto(*c, 4, &got);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, Content(0, 4));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(PeerServer::kHandshakeMs));
  // The rest close at their deadline.
  std::this_thread::sleep_for(std::chrono::milliseconds(PeerServer::kHandshakeMs + 700));
  for (auto& fd : slow) EXPECT_EQ(Drain(fd.get(), 100), "");
  EXPECT_GE(server_->refused(), static_cast<uint64_t>(PeerServer::kMaxUnauthenticated + 20));
}

// Scale-out: past the connection cap the authenticated connection idle the longest closes, and
// its client, finding it closed, dials again without taking the peer for down; connections that
// have not authenticated never make room.
TEST_F(PeerTest, PastTheCapTheLongestIdleConnectionMakesRoom) {
  StartServer();
  constexpr int kCap = 4;
  server_->SetMaxConnectionsForTest(kCap);
  std::vector<std::unique_ptr<PeerClient>> clients;
  std::string got;
  auto fetch = [&](size_t client, uint32_t entry) {
    Status st = FetchInto(*clients[client], entry, &got);
    EXPECT_TRUE(st.ok()) << client << ": " << st.ToString();
    EXPECT_EQ(got, Content(0, entry));
  };
  // The service's loop evicts after the batch of events that holds the new session's request,
  // which may end after the reply reached the client: wait up to 2 s for it, then count.
  auto evicted = [&](uint64_t want) {
    for (int i = 0; i < 200 && server_->evicted() < want; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return server_->evicted();
  };
  for (size_t i = 0; i < kCap; i++) {  // the cap's worth of readers, each keeping its session
    clients.push_back(Client());
    fetch(i, static_cast<uint32_t>(i));
  }
  // Raw connections that never authenticate, up to the cap: nothing authenticated closes.
  std::vector<UniqueFD> raw;
  for (int i = 0; i < kCap; i++) raw.push_back(Raw(server_->Endpoint()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // every session idle for 1 s
  // Each session still there, used in this order: 100 ms apart, since the service stamps a
  // session's use once its reply is out, which under load may come after the next client's.
  for (size_t i = 0; i < kCap; i++) {
    fetch(i, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(server_->evicted(), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  // One reader more: the session used the longest ago (client 0's) closes for it.
  clients.push_back(Client());
  fetch(kCap, 6);
  EXPECT_EQ(evicted(1), 1u);
  fetch(kCap, 7);  // the newest session is kept
  EXPECT_EQ(server_->evicted(), 1u);
  // Client 0 finds its session closed, dials again (closing client 1's, idle the longest now),
  // and reads; the peer was not marked down, so the next read works as well.
  fetch(0, 6);
  EXPECT_EQ(evicted(2), 2u);
  fetch(0, 7);
  EXPECT_FALSE(clients[0]->IsDown(1));
  EXPECT_EQ(server_->refused(), 0u);
}

// Connections that send nothing, as many as the cap of unauthenticated ones: the job's client
// still gets in at once (the oldest silent one makes room), without waiting for their deadline.
TEST_F(PeerTest, SilentConnectionsDoNotHoldTheHandshakeSlots) {
  StartServer();
  std::vector<UniqueFD> silent;
  for (int i = 0; i < PeerServer::kMaxUnauthenticated; i++) {
    silent.push_back(Raw(server_->Endpoint()));
    ASSERT_TRUE(silent.back().valid());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted
  auto c = Client();
  std::string got;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = FetchInto(*c, 2, &got);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, Content(0, 2));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(PeerServer::kHandshakeMs / 2));
  EXPECT_GE(server_->refused(), 1u);  // the silent one that made room
}

// Issue 30, finding 5: a hello costs the server a MUNGE credential, and anyone may send one.
// Handshakes run on a pool of their own: with every serving thread busy, a hello is still
// answered, so a flood of hellos never takes the serving threads either.
TEST_F(PeerTest, HandshakesDoNotWaitForTheServingPool) {
  StartServer();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> blocked{0};
  for (size_t i = 0; i < pool_.size(); i++)
    pool_.Submit([&, released] {
      blocked++;
      released.wait();
    });
  while (blocked.load() < static_cast<int>(pool_.size())) std::this_thread::sleep_for(1ms);
  UniqueFD fd = Raw(server_->Endpoint());
  ASSERT_TRUE(fd.valid());
  wire::Header hello{wire::kMagic, wire::kHello, 0, 1, wire::kNonceLen};
  std::string msg(reinterpret_cast<const char*>(&hello), sizeof hello);
  msg += std::string(wire::kNonceLen, 'n');
  ASSERT_EQ(::send(fd.get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  struct pollfd p = {fd.get(), POLLIN, 0};
  const bool answered = ::poll(&p, 1, PeerServer::kHandshakeMs / 2) == 1;
  release.set_value();
  ASSERT_TRUE(answered) << "the hello waited for the serving pool";
  wire::Header rp;
  ASSERT_EQ(::recv(fd.get(), &rp, sizeof rp, MSG_WAITALL), static_cast<ssize_t>(sizeof rp));
  EXPECT_EQ(rp.op, wire::kHello);
  EXPECT_EQ(rp.a, 0u);
}

// Forwards bytes both ways between an accepted connection and the server: what a user who bound
// a dead agent's port could do with the job's connections.
class Relay {
 public:
  explicit Relay(std::string target) : target_(std::move(target)) {
    listen_.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    ::bind(listen_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::listen(listen_.get(), 4);
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    endpoint_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    thread_ = std::thread([this] { Run(); });
  }
  ~Relay() {
    ::shutdown(listen_.get(), SHUT_RDWR);
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Run() {
    UniqueFD a(::accept(listen_.get(), nullptr, nullptr));
    if (!a.valid()) return;
    UniqueFD b = PeerTest::Raw(target_);
    struct pollfd p[2] = {{a.get(), POLLIN, 0}, {b.get(), POLLIN, 0}};
    char buf[65536];
    while (::poll(p, 2, 3000) > 0) {
      for (int i = 0; i < 2; i++) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t r = ::recv(p[i].fd, buf, sizeof buf, 0);
        if (r <= 0 || ::send(p[1 - i].fd, buf, static_cast<size_t>(r), MSG_NOSIGNAL) != r) return;
      }
    }
  }
  std::string target_, endpoint_;
  UniqueFD listen_;
  std::thread thread_;
};

TEST_F(PeerTest, ARelayedHandshakeFailsOnTheEndpoints) {
  StartServer();
  Relay relay(server_->Endpoint());
  auto c = Client("job-a", relay.endpoint());
  std::string got;
  Status st = FetchInto(*c, 3, &got);
  EXPECT_EQ(st.code(), Status::Code::kPermission) << st.ToString();
  EXPECT_NE(st.ToString().find("endpoint"), std::string::npos) << st.ToString();
  EXPECT_TRUE(got.empty());
}

TEST_F(PeerTest, OutOfDescriptorsTheServiceWaitsInsteadOfSpinning) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP()
      << "starts a server in a child forked from a threaded process, which TSan cannot follow";
#endif
  // F3: a server whose process has run out of descriptors. A listening socket with pending
  // connections stays readable; accept fails with EMFILE; the old loop spun on it.
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ThreadPool pool(2);
    PeerServer s;
    bool ok = s.Start(
                   "127.0.0.1", PeerIdentity{"job-a", 1},
                   [this](uint32_t, uint32_t e, int* fd, uint64_t* n) {
                     *fd = ::open((dir_ + "/" + std::to_string(e)).c_str(), O_RDONLY | O_CLOEXEC);
                     *n = Content(0, e).size();
                     return *fd >= 0 ? 0 : ENOENT;
                   },
                   [](uint32_t) { return std::vector<uint32_t>{}; }, &pool)
                  .ok();
    struct rlimit rl;
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = static_cast<rlim_t>(::dup(0)) + 4;  // room for a few more descriptors only
    ::setrlimit(RLIMIT_NOFILE, &rl);
    const std::string ep = ok ? s.Endpoint() : "";
    (void)!::write(to_parent[1], ep.c_str(), ep.size() + 1);
    char c;
    (void)!::read(to_child[0], &c, 1);  // until the parent has flooded and let go
    struct rusage ru;
    ::getrusage(RUSAGE_SELF, &ru);
    const long cpu_ms = ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 +
                        ru.ru_stime.tv_sec * 1000 + ru.ru_stime.tv_usec / 1000;
    (void)!::write(to_parent[1], &cpu_ms, sizeof cpu_ms);
    (void)!::read(to_child[0], &c, 1);  // until the parent's client is done
    ::_exit(0);
  }
  ::close(to_parent[1]);  // a child that dies early ends the reads below instead of hanging them
  ::close(to_child[0]);
  char ep[64] = {};
  ASSERT_GT(::read(to_parent[0], ep, sizeof ep), 1);
  std::vector<UniqueFD> flood;
  for (int i = 0; i < 40; i++) flood.push_back(Raw(ep));
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  flood.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  (void)!::write(to_child[1], "x", 1);
  long cpu_ms = -1;
  ASSERT_EQ(::read(to_parent[0], &cpu_ms, sizeof cpu_ms), static_cast<ssize_t>(sizeof cpu_ms));
  EXPECT_LT(cpu_ms, 1000) << "the server used " << cpu_ms << " ms of CPU in 2 s out of descriptors";
  // Once descriptors are free again, the job's own client is served.
  PeerClient c;
  c.SetIdentity(PeerIdentity{"job-a", 0});
  c.SetEndpoints({"", ep});
  std::string got;
  Status st = FetchInto(c, 6, &got);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, Content(0, 6));
  (void)!::write(to_child[1], "x", 1);
  ::waitpid(pid, nullptr, 0);
  for (int fd : {to_parent[0], to_child[1]}) ::close(fd);
}

TEST(PeerListenAddress, TakesAnAddressOrAnInterfaceAndRefusesOthers) {
  EXPECT_EQ(PeerListenAddress("127.0.0.1").value(), "127.0.0.1");
  EXPECT_EQ(PeerListenAddress("lo").value(), "127.0.0.1");
  EXPECT_FALSE(PeerListenAddress("no-such-interface0").ok());
  ::setenv("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1", 1);
  EXPECT_EQ(PeerListenAddress("").value(), "127.0.0.1");  // the route to the launch node
  ::unsetenv("SLURM_LAUNCH_NODE_IPADDR");
  EXPECT_TRUE(PeerListenAddress("").ok());
}

}  // namespace
}  // namespace fanstore::agent
