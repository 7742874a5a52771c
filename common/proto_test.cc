#include "common/proto.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/remove_tree.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"

namespace fanstore::proto {
namespace {

class ProtoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    a_.Reset(sv[0]);
    b_.Reset(sv[1]);
  }
  // Writes raw bytes, as a client that does not follow the protocol would.
  void Raw(const void* p, size_t n) {
    ASSERT_EQ(::send(a_.get(), p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
  }
  UniqueFD a_, b_;
};

// Whether the read end of a pipe sees EOF, i.e. every copy of the write end is closed.
bool PipeAtEof(int rd) {
  struct pollfd p = {rd, POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) return false;
  char c;
  return ::read(rd, &c, 1) == 0;
}

TEST_F(ProtoTest, EveryOpRoundTripsWithItsPayload) {
  struct Case {
    Op op;
    int32_t status;
    std::string payload;
  };
  const std::vector<Case> cases = {
      {kOpen, 0, "dir/sub/file.bin"},       {kOpen, ENOENT, ""},           {kStatus, 0, ""},
      {kStatus, 0, R"({"state":"ready"})"}, {kStats, 0, R"({"opens":3})"},
  };
  for (const Case& c : cases) {
    Frame f{kMagic, c.op, c.status, static_cast<uint32_t>(c.payload.size())};
    ASSERT_EQ(Send(a_.get(), f, c.payload.data(), -1), 0);
    Frame got{};
    char buf[256];
    int fd = 7;  // must be reset to -1 when no descriptor comes
    ASSERT_EQ(Recv(b_.get(), &got, buf, sizeof buf, &fd), 0);
    EXPECT_EQ(got.magic, kMagic);
    EXPECT_EQ(got.op, static_cast<uint32_t>(c.op));
    EXPECT_EQ(got.status, c.status);
    EXPECT_EQ(std::string(buf, got.len), c.payload);
    EXPECT_EQ(fd, -1);
  }
}

TEST_F(ProtoTest, ANullPayloadSendsTheFrameAlone) {
  Frame f{kMagic, kStatus, 0, 0};
  ASSERT_EQ(Send(a_.get(), f, nullptr, -1), 0);
  Frame got{};
  ASSERT_EQ(Recv(b_.get(), &got, nullptr, 0, nullptr), 0);
  EXPECT_EQ(got.op, static_cast<uint32_t>(kStatus));
  EXPECT_EQ(got.len, 0u);
}

TEST_F(ProtoTest, ADescriptorTravelsWithTheReplyAndArrivesCloseOnExec) {
  char path[] = "/tmp/fanstore-proto-test-XXXXXX";
  UniqueFD file(::mkstemp(path));
  ASSERT_TRUE(file.valid());
  ::unlink(path);
  ASSERT_EQ(::write(file.get(), "content", 7), 7);
  Frame f{kMagic, kOpen, 0, 0};
  ASSERT_EQ(Send(a_.get(), f, nullptr, file.get()), 0);
  Frame got{};
  int fd = -1;
  ASSERT_EQ(Recv(b_.get(), &got, nullptr, 0, &fd), 0);
  ASSERT_GE(fd, 0);
  UniqueFD received(fd);
  EXPECT_NE(received.get(), file.get());
  struct stat s1, s2;
  ASSERT_EQ(::fstat(file.get(), &s1), 0);
  ASSERT_EQ(::fstat(received.get(), &s2), 0);
  EXPECT_EQ(s1.st_ino, s2.st_ino);
  EXPECT_EQ(s1.st_dev, s2.st_dev);
  char buf[8] = {};
  EXPECT_EQ(::pread(received.get(), buf, 7, 0), 7);
  EXPECT_STREQ(buf, "content");
  EXPECT_TRUE(::fcntl(received.get(), F_GETFD) & FD_CLOEXEC);
}

TEST_F(ProtoTest, ADescriptorAndAPayloadArriveTogether) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFD rd(p[0]), wr(p[1]);
  const std::string payload = "with a descriptor";
  Frame f{kMagic, kOpen, 0, static_cast<uint32_t>(payload.size())};
  ASSERT_EQ(Send(a_.get(), f, payload.data(), wr.get()), 0);
  Frame got{};
  char buf[64];
  int fd = -1;
  ASSERT_EQ(Recv(b_.get(), &got, buf, sizeof buf, &fd), 0);
  UniqueFD received(fd);
  EXPECT_EQ(std::string(buf, got.len), payload);
  ASSERT_TRUE(received.valid());
  ASSERT_EQ(::write(received.get(), "x", 1), 1);  // the pipe's write end, passed across
  char c = 0;
  EXPECT_EQ(::read(rd.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST_F(ProtoTest, AnUnwantedDescriptorIsClosedNotLeaked) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFD rd(p[0]), wr(p[1]);
  Frame f{kMagic, kStatus, 0, 0};
  ASSERT_EQ(Send(a_.get(), f, nullptr, wr.get()), 0);
  wr.Reset();
  Frame got{};
  ASSERT_EQ(Recv(b_.get(), &got, nullptr, 0, nullptr), 0);  // no room for a descriptor
  EXPECT_TRUE(PipeAtEof(rd.get()));  // the only other copy of the write end is gone
}

TEST_F(ProtoTest, ABadMagicIsAProtocolError) {
  Frame f{0xdeadbeef, kOpen, 0, 0};
  Raw(&f, sizeof f);
  Frame got{};
  char buf[16];
  EXPECT_EQ(Recv(b_.get(), &got, buf, sizeof buf, nullptr), -EPROTO);
}

TEST_F(ProtoTest, APayloadLargerThanTheBufferIsRefusedAndItsDescriptorClosed) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFD rd(p[0]), wr(p[1]);
  const std::string payload(100, 'p');
  Frame f{kMagic, kOpen, 0, static_cast<uint32_t>(payload.size())};
  ASSERT_EQ(Send(a_.get(), f, payload.data(), wr.get()), 0);
  wr.Reset();
  Frame got{};
  char buf[10];
  int fd = 99;
  EXPECT_EQ(Recv(b_.get(), &got, buf, sizeof buf, &fd), -EPROTO);
  EXPECT_EQ(fd, -1);
  EXPECT_TRUE(PipeAtEof(rd.get()));
}

TEST_F(ProtoTest, AHostileLengthIsRefusedWithoutReadingFurther) {
  // The receiver's buffer is ample, but the frame claims more than any message may carry:
  // refused from the header alone, nothing of the claimed length is waited for or allocated.
  Frame f{kMagic, kOpen, 0, 0xffffffffu};
  Raw(&f, sizeof f);
  std::vector<char> buf(kMaxPayload + 16);
  Frame got{};
  EXPECT_EQ(Recv(b_.get(), &got, buf.data(), buf.size(), nullptr), -EPROTO);
  f.len = kMaxPayload + 1;
  Raw(&f, sizeof f);
  EXPECT_EQ(Recv(b_.get(), &got, buf.data(), buf.size(), nullptr), -EPROTO);
}

TEST_F(ProtoTest, ATruncatedFrameIsAReset) {
  Frame f{kMagic, kOpen, 0, 0};
  Raw(&f, sizeof f / 2);
  ::shutdown(a_.get(), SHUT_WR);
  Frame got{};
  EXPECT_EQ(Recv(b_.get(), &got, nullptr, 0, nullptr), -ECONNRESET);
}

TEST_F(ProtoTest, ATruncatedPayloadIsAResetAndItsDescriptorClosed) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFD rd(p[0]), wr(p[1]);
  // The frame (with a descriptor) claims 50 bytes; 10 come, then the peer is gone.
  ASSERT_EQ(Send(a_.get(), Frame{kMagic, kOpen, 0, 50}, nullptr, wr.get()), 0);
  wr.Reset();
  Raw("0123456789", 10);
  ::shutdown(a_.get(), SHUT_WR);
  Frame got{};
  char buf[64];
  int fd = 99;
  EXPECT_EQ(Recv(b_.get(), &got, buf, sizeof buf, &fd), -ECONNRESET);
  EXPECT_EQ(fd, -1);
  EXPECT_TRUE(PipeAtEof(rd.get()));
}

TEST_F(ProtoTest, EndOfStreamIsAReset) {
  a_.Reset();
  Frame got{};
  EXPECT_EQ(Recv(b_.get(), &got, nullptr, 0, nullptr), -ECONNRESET);
}

TEST_F(ProtoTest, AFrameArrivingByteByByteIsReassembled) {
  const std::string payload = "slowly/arriving/path";
  Frame f{kMagic, kOpen, 0, static_cast<uint32_t>(payload.size())};
  std::string wire(reinterpret_cast<const char*>(&f), sizeof f);
  wire += payload;
  std::thread writer([&] {
    for (char c : wire) {
      ASSERT_EQ(::send(a_.get(), &c, 1, MSG_NOSIGNAL), 1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  Frame got{};
  char buf[64];
  ASSERT_EQ(Recv(b_.get(), &got, buf, sizeof buf, nullptr), 0);
  writer.join();
  EXPECT_EQ(std::string(buf, got.len), payload);
}

TEST_F(ProtoTest, TheLargestPayloadGoesThroughPartialWrites) {
  // 1 MiB is more than a socket buffer holds: Send must resume after partial writes.
  std::string payload(kMaxPayload, '\0');
  for (size_t i = 0; i < payload.size(); i++) payload[i] = static_cast<char>(i * 131 + 7);
  std::vector<char> buf(kMaxPayload);
  Frame got{};
  int rc = -1;
  std::thread reader([&] { rc = Recv(b_.get(), &got, buf.data(), buf.size(), nullptr); });
  Frame f{kMagic, kStats, 0, kMaxPayload};
  EXPECT_EQ(Send(a_.get(), f, payload.data(), -1), 0);
  reader.join();
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(got.len, kMaxPayload);
  EXPECT_EQ(std::memcmp(buf.data(), payload.data(), payload.size()), 0);
}

TEST_F(ProtoTest, SendingToAClosedPeerIsAnErrorNotASignal) {
  b_.Reset();
  Frame f{kMagic, kStatus, 0, 0};
  EXPECT_EQ(Send(a_.get(), f, nullptr, -1), -EPIPE);
}

class ConnectTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"proto-test"};
  void SetUp() override {
    dir_ = tmp_.path();
    path_ = dir_ + "/sock";
  }
  UniqueFD Listen() {
    UniqueFD s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(s.get(), 4), 0);
    return s;
  }
  std::string dir_, path_;
};

TEST_F(ConnectTest, ConnectsToAListeningSocket) {
  UniqueFD listener = Listen();
  int fd = Connect(path_.c_str());
  ASSERT_GE(fd, 0);
  UniqueFD client(fd);
  EXPECT_TRUE(::fcntl(client.get(), F_GETFD) & FD_CLOEXEC);
  UniqueFD server(::accept(listener.get(), nullptr, nullptr));
  ASSERT_TRUE(server.valid());
  ASSERT_EQ(Send(client.get(), Frame{kMagic, kStatus, 0, 0}, nullptr, -1), 0);
  Frame got{};
  EXPECT_EQ(Recv(server.get(), &got, nullptr, 0, nullptr), 0);
  EXPECT_EQ(got.op, static_cast<uint32_t>(kStatus));
}

TEST_F(ConnectTest, NoSocketIsENOENT) { EXPECT_EQ(Connect(path_.c_str()), -ENOENT); }

TEST_F(ConnectTest, APathTooLongForSunPathIsRefused) {
  const std::string longpath = "/tmp/" + std::string(200, 'x');
  EXPECT_EQ(Connect(longpath.c_str()), -ENAMETOOLONG);
}

TEST_F(ConnectTest, WithATimeoutASilentAgentGivesEAGAIN) {
  UniqueFD listener = Listen();
  int fd = Connect(path_.c_str(), 100);
  ASSERT_GE(fd, 0);
  UniqueFD client(fd);
  const auto t0 = std::chrono::steady_clock::now();
  Frame got{};
  EXPECT_EQ(Recv(client.get(), &got, nullptr, 0, nullptr), -EAGAIN);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(90));
  EXPECT_LT(waited, std::chrono::seconds(20));  // the timeout ended it, not a hang
}

}  // namespace
}  // namespace fanstore::proto
