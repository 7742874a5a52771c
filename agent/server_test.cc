// The local service over a real Unix socket in a temporary run directory, with clients that
// speak common/proto.h as the interceptor and the `fanstore` tool do.
#include "agent/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/testing.h"
#include "common/remove_tree.h"
#include "common/run_dir.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

using testing::Answer;
using testing::Ask;

class ServerTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"server-test"};
  void SetUp() override {
    dir_ = tmp_.path();
    path_ = dir_ + "/" + run_dir::kSocketName;
  }
  void TearDown() override { server_.Stop(); }
  // A handler that echoes: kStatus gives "status:<payload>", kStats counts, kOpen opens the
  // payload under dir_ (or replies with the errno), and any other op is EINVAL.
  void StartEcho() {
    Status s = server_.Start(path_, [this](proto::Op op, const std::string& p, UniqueFD passed) {
      calls_++;
      switch (op) {
        case proto::kServeView: {  // tells what the passed descriptor is
          struct stat st;
          if (!passed.valid() || ::fstat(passed.get(), &st) != 0) return Reply{EBADF, "", -1};
          return Reply{0, S_ISFIFO(st.st_mode) ? "fifo" : "other", -1};
        }
        case proto::kStatus:
          return Reply{0, "status:" + p, -1};
        case proto::kStats:
          return Reply{0, std::to_string(calls_.load()), -1};
        case proto::kOpen: {
          int fd = ::open((dir_ + "/" + p).c_str(), O_RDONLY | O_CLOEXEC);
          return fd < 0 ? Reply{errno, "", -1} : Reply{0, "", fd};
        }
      }
      return Reply{EINVAL, "", -1};
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  UniqueFD Client() {
    int fd = proto::Connect(path_.c_str(), 5000);
    EXPECT_GE(fd, 0) << strerror(-fd);
    return UniqueFD(fd);
  }
  std::string dir_, path_;
  LocalServer server_;
  std::atomic<int> calls_{0};
};

TEST_F(ServerTest, AnswersEachOpOnOneReusedConnection) {
  StartEcho();
  UniqueFD c = Client();
  Answer a = Ask(c.get(), proto::kStatus, "hello");
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(a.frame.magic, proto::kMagic);
  EXPECT_EQ(a.frame.op, static_cast<uint32_t>(proto::kStatus));  // echoed
  EXPECT_EQ(a.frame.status, 0);
  EXPECT_EQ(a.payload, "status:hello");
  EXPECT_EQ(a.fd, -1);
  for (int i = 2; i <= 5; i++) {
    a = Ask(c.get(), proto::kStats);
    ASSERT_EQ(a.rc, 0);
    EXPECT_EQ(a.payload, std::to_string(i));
  }
  a = Ask(c.get(), static_cast<proto::Op>(99));  // the handler decides about unknown ops
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(a.frame.op, 99u);
  EXPECT_EQ(a.frame.status, EINVAL);
}

// kServeView carries a descriptor (the plugin's /dev/fuse) to the handler; without one the
// handler sees none.
TEST_F(ServerTest, ADescriptorSentWithARequestReachesTheHandler) {
  StartEcho();
  UniqueFD c = Client();
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  const UniqueFD rd(pipe_fds[0]), wr(pipe_fds[1]);
  proto::Frame f{proto::kMagic, proto::kServeView, 0, 0};
  ASSERT_EQ(proto::Send(c.get(), f, nullptr, rd.get()), 0);
  char buf[64];
  ASSERT_EQ(proto::Recv(c.get(), &f, buf, sizeof buf, nullptr), 0);
  EXPECT_EQ(f.status, 0);
  EXPECT_EQ(std::string(buf, f.len), "fifo");
  Answer a = Ask(c.get(), proto::kServeView);
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(a.frame.status, EBADF);
}

TEST_F(ServerTest, TheSocketIsBornPrivateWhateverTheUmask) {
  const mode_t old = ::umask(0);
  StartEcho();
  ::umask(old);
  struct stat st;
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(::umask(old), old);  // and the process's umask is restored
}

TEST_F(ServerTest, AnOpenedFileComesBackAsADescriptorOrAnErrno) {
  {
    UniqueFD f(::open((dir_ + "/data.bin").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_EQ(::write(f.get(), "payload!", 8), 8);
  }
  StartEcho();
  UniqueFD c = Client();
  Answer a = Ask(c.get(), proto::kOpen, "data.bin");
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(a.frame.status, 0);
  ASSERT_GE(a.fd, 0);
  UniqueFD got(a.fd);
  char buf[9] = {};
  EXPECT_EQ(::pread(got.get(), buf, 8, 0), 8);
  EXPECT_STREQ(buf, "payload!");
  a = Ask(c.get(), proto::kOpen, "missing");
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(a.frame.status, ENOENT);
  EXPECT_EQ(a.fd, -1);
  EXPECT_EQ(a.payload, "");
}

TEST_F(ServerTest, TheServerClosesItsCopyOfAPassedDescriptor) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFD rd(p[0]), wr(p[1]);
  ASSERT_TRUE(server_
                  .Start(path_,
                         [&](proto::Op, const std::string&, UniqueFD) {
                           return Reply{0, "", ::fcntl(wr.get(), F_DUPFD_CLOEXEC, 0)};
                         })
                  .ok());
  UniqueFD c = Client();
  Answer a = Ask(c.get(), proto::kOpen, "x");
  ASSERT_EQ(a.rc, 0);
  ASSERT_GE(a.fd, 0);
  ::close(a.fd);
  wr.Reset();
  // Every write end is closed now unless the server leaked its copy.
  struct pollfd pf = {rd.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&pf, 1, 2000), 1);
  char ch;
  EXPECT_EQ(::read(rd.get(), &ch, 1), 0);
}

TEST_F(ServerTest, ManyClientsAtOnceEachGetTheirOwnAnswers) {
  StartEcho();
  constexpr int kClients = 24, kRequests = 20;
  std::atomic<int> good{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; i++)
    clients.emplace_back([&, i] {
      UniqueFD c(proto::Connect(path_.c_str(), 5000));
      if (!c.valid()) return;
      for (int r = 0; r < kRequests; r++) {
        const std::string mine = std::to_string(i) + "/" + std::to_string(r);
        Answer a = Ask(c.get(), proto::kStatus, mine);
        if (a.rc == 0 && a.payload == "status:" + mine) good++;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(good.load(), kClients * kRequests);
  EXPECT_EQ(calls_.load(), kClients * kRequests);
}

TEST_F(ServerTest, ASlowRequestDoesNotBlockAnotherClient) {
  std::atomic<bool> release{false};
  ASSERT_TRUE(server_
                  .Start(path_,
                         [&](proto::Op op, const std::string&, UniqueFD) {
                           if (op == proto::kOpen)
                             while (!release) std::this_thread::sleep_for(milliseconds(1));
                           return Reply{0, "done", -1};
                         })
                  .ok());
  UniqueFD slow = Client();
  std::thread waiter([&] { EXPECT_EQ(Ask(slow.get(), proto::kOpen, "x").payload, "done"); });
  UniqueFD fast = Client();
  Answer a = Ask(fast.get(), proto::kStatus);
  EXPECT_EQ(a.rc, 0);
  EXPECT_EQ(a.payload, "done");  // answered while the slow open is held: no time bound needed
  release = true;
  waiter.join();
}

TEST_F(ServerTest, AClientSpeakingGarbageLosesOnlyItsOwnConnection) {
  StartEcho();
  UniqueFD good = Client();
  ASSERT_EQ(Ask(good.get(), proto::kStatus).rc, 0);
  UniqueFD bad = Client();
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(bad.get(), junk, sizeof junk, MSG_NOSIGNAL), 0);
  proto::Frame f;
  EXPECT_EQ(proto::Recv(bad.get(), &f, nullptr, 0, nullptr), -ECONNRESET);
  UniqueFD greedy = Client();  // claims more than any request may carry
  proto::Frame huge{proto::kMagic, proto::kOpen, 0, proto::kMaxPayload + 1};
  ASSERT_EQ(::send(greedy.get(), &huge, sizeof huge, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof huge));
  EXPECT_EQ(proto::Recv(greedy.get(), &f, nullptr, 0, nullptr), -ECONNRESET);
  Answer a = Ask(good.get(), proto::kStatus, "still");
  ASSERT_EQ(a.rc, 0);
  EXPECT_EQ(a.payload, "status:still");
  EXPECT_EQ(Ask(Client().get(), proto::kStatus).rc, 0);  // and new clients are served
}

TEST_F(ServerTest, AConnectionFromAnotherUserIsRefused) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  StartEcho();
  // Open the way in for uid 65534: only the SO_PEERCRED check stands between it and the agent.
  ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
  ASSERT_EQ(::chmod(path_.c_str(), 0666), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    int s = proto::Connect(path_.c_str(), 2000);
    if (s < 0) ::_exit(4);
    proto::Frame f{proto::kMagic, proto::kStatus, 0, 0};
    if (proto::Send(s, f, nullptr, -1) != 0) ::_exit(0);  // refused before the request
    proto::Frame r;
    ::_exit(proto::Recv(s, &r, nullptr, 0, nullptr) == -ECONNRESET ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: answered, 3: setuid, 4: connect";
  EXPECT_EQ(calls_.load(), 0);
  UniqueFD mine = Client();  // the owner is still served
  EXPECT_EQ(Ask(mine.get(), proto::kStatus).rc, 0);
}

TEST_F(ServerTest, StopEndsConnectionsPromptlyAndRemovesTheSocket) {
  StartEcho();
  UniqueFD idle = Client();
  ASSERT_EQ(Ask(idle.get(), proto::kStatus).rc, 0);
  const auto t0 = steady_clock::now();
  server_.Stop();
  EXPECT_LT(steady_clock::now() - t0, milliseconds(10000));  // an idle client holds nothing up
  struct stat st;
  EXPECT_NE(::lstat(path_.c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  proto::Frame f;
  EXPECT_EQ(proto::Recv(idle.get(), &f, nullptr, 0, nullptr), -ECONNRESET);
  EXPECT_EQ(proto::Connect(path_.c_str()), -ENOENT);
  server_.Stop();  // a second Stop does nothing
}

TEST_F(ServerTest, DestructionStopsTheServer) {
  {
    LocalServer s;
    ASSERT_TRUE(
        s.Start(path_, [](proto::Op, const std::string&, UniqueFD) { return Reply{}; }).ok());
    UniqueFD c = Client();
    EXPECT_EQ(Ask(c.get(), proto::kStatus).rc, 0);
  }
  EXPECT_NE(::access(path_.c_str(), F_OK), 0);
}

TEST_F(ServerTest, AnExistingSocketIsNeitherTakenOverNorRemoved) {
  StartEcho();
  {
    LocalServer second;
    Status s = second.Start(path_, [](proto::Op, const std::string&, UniqueFD) { return Reply{}; });
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(path_), std::string::npos) << s.ToString();
  }  // the failed server's destructor must not unlink the first one's socket
  struct stat st;
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  UniqueFD c = Client();
  EXPECT_EQ(Ask(c.get(), proto::kStatus, "first").payload, "status:first");
}

TEST_F(ServerTest, APathTooLongForASocketIsAnInvalidArgument) {
  LocalServer s;
  Status st = s.Start(dir_ + "/" + std::string(200, 'x'),
                      [](proto::Op, const std::string&, UniqueFD) { return Reply{}; });
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
}

}  // namespace
}  // namespace fanstore::agent
