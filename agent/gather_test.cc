// The large exchange's gather over the peer service: the schedule (every rank once, each from an
// agent that holds it by then), and real agents on loopback with the node's munged: every agent
// ends with every message; a forwarder that alters a message is found out and passed by; another
// user's flood of half-open connections does not stop it; a dead agent and an oversized pointer
// are clear errors.
#include "agent/gather.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "agent/testing.h"
#include "common/thread_pool.h"

namespace fanstore::agent {
namespace {

TEST(GatherTest, ScheduleGivesEveryRankOnceFromAnAgentThatHoldsIt) {
  for (uint32_t n = 1; n <= 70; n++) {
    // What each agent holds before each step: the steps run in lockstep here, and an agent
    // serves step k only with what it held after its own step k - 1.
    std::vector<std::set<uint32_t>> have(n);
    for (uint32_t i = 0; i < n; i++) have[i] = {i};
    const size_t steps = Gather::Schedule(0, n).size();
    for (size_t k = 0; k < steps; k++) {
      std::vector<std::set<uint32_t>> next = have;
      for (uint32_t i = 0; i < n; i++) {
        const auto s = Gather::Schedule(i, n);
        ASSERT_EQ(s.size(), steps) << "n=" << n;
        for (uint32_t c = 0; c < s[k].count; c++) {
          const uint32_t r = (s[k].first + c) % n;
          ASSERT_TRUE(have[s[k].from].count(r)) << "n=" << n << " agent " << i << " step " << k;
          ASSERT_TRUE(next[i].insert(r).second) << "rank " << r << " twice, n=" << n;
        }
      }
      have = std::move(next);
    }
    for (uint32_t i = 0; i < n; i++) EXPECT_EQ(have[i].size(), n) << "n=" << n << " agent " << i;
    // ceil(log2 n) steps: as many connections per agent.
    EXPECT_EQ(steps, n == 1 ? 0u : static_cast<size_t>(64 - __builtin_clzll(n - 1)));
  }
}

// Agents on loopback, each with its peer service, its client and its gather.
class GatherNet : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { (void)testing::StartMunged(); }
  void SetUp() override {
    if (!testing::MungeWorks()) GTEST_SKIP() << "munged is not running";
  }
  struct Node {
    Gather gather;
    PeerServer server;
    PeerClient client;
    std::function<std::string(uint32_t, const std::string&)> forward;  // alters what it forwards
  };
  static std::string Message(uint32_t r) {
    std::string m(1000 + r * 7919 % 50000, '\0');
    for (size_t i = 0; i < m.size(); i++) m[i] = static_cast<char>(i * 31 + r);
    return m;
  }
  void Start(uint32_t n) {
    nodes_.clear();
    for (uint32_t r = 0; r < n; r++) nodes_.push_back(std::make_unique<Node>());
    std::vector<std::string> eps;
    for (uint32_t r = 0; r < n; r++) {
      Node* x = nodes_[r].get();
      x->gather.Begin(r, n, Message(r));
      x->gather.SetWaitForTest(3000);
      const PeerIdentity me{"job-g", r, n};
      x->client.SetIdentity(me);
      ASSERT_TRUE(x->server
                      .Start(
                          "127.0.0.1", me,
                          [](uint32_t, uint32_t, int*, uint64_t*) { return ENOENT; },
                          [](uint32_t) { return std::vector<uint32_t>{}; }, &pool_, &pool_,
                          [x, r](uint32_t rank, int ms, std::shared_ptr<const std::string>* m) {
                            int st = x->gather.Wait(rank, std::min(ms, 2000), m);
                            if (st == 0 && rank != r && x->forward)
                              *m = std::make_shared<const std::string>(x->forward(rank, **m));
                            return st;
                          })
                      .ok());
      eps.push_back(x->server.Endpoint());
    }
    for (auto& x : nodes_) x->client.SetEndpoints(eps);
    for (uint32_t r = 0; r < n; r++)
      pointers_.push_back(exchange::Pointer{eps[r], Message(r).size(), 0, 0});
    for (uint32_t r = 0; r < n; r++) {  // the hash, as EncodePointer computes it
      auto read = exchange::ReadPointers({exchange::EncodePointer(eps[r], Message(r))});
      ASSERT_TRUE(read.ok());
      pointers_[r] = *(*read)[0];
    }
  }
  // Runs every agent's gather at once; their outcomes by rank.
  std::vector<Status> RunAll(std::vector<uint64_t> bound = {}) {
    const size_t n = nodes_.size();
    if (bound.empty()) bound.assign(n, 1 << 20);
    std::vector<std::future<Status>> f;
    for (size_t r = 0; r < n; r++)
      f.push_back(std::async(std::launch::async, [this, r, n, bound] {
        if (!nodes_[r]) return Status::OK();
        std::vector<std::string> in_fence(n);
        std::vector<std::optional<exchange::Pointer>> p(pointers_.begin(), pointers_.end());
        return nodes_[r]->gather.Run(&nodes_[r]->client, p, &in_fence, bound);
      }));
    std::vector<Status> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  }
  // Runs every agent's gather; each succeeds and holds every agent's message.
  void ExpectEveryAgentGathersAll() {
    auto st = RunAll();
    for (uint32_t r = 0; r < nodes_.size(); r++) {
      EXPECT_TRUE(st[r].ok()) << r << ": " << st[r].ToString();
      auto v = nodes_[r]->gather.Views();
      ASSERT_EQ(v.size(), nodes_.size());
      for (uint32_t k = 0; k < v.size(); k++) EXPECT_EQ(v[k], Message(k)) << "agent " << r;
    }
  }

  ThreadPool pool_{16};
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<exchange::Pointer> pointers_;
};

TEST_F(GatherNet, EveryAgentGetsEveryMessage) {
  Start(6);
  ExpectEveryAgentGathersAll();
}

TEST_F(GatherNet, AnAlteredForwardIsFoundAndTheMessageComesFromItsPublisher) {
  Start(5);
  nodes_[2]->forward = [](uint32_t, const std::string& m) { return m + "x"; };  // wrong size
  nodes_[3]->forward = [](uint32_t, const std::string& m) {  // same size, other bytes
    std::string b = m;
    b[b.size() / 2] ^= 1;
    return b;
  };
  ExpectEveryAgentGathersAll();
}

// Another user on the node holds more connections than the cap open to one agent, each a byte
// into its hello, and opens a new one whenever one closes: the agents still gather everything
// (the oldest unauthenticated connection makes room; a missing message is asked again).
TEST_F(GatherNet, AFloodOfHalfOpenConnectionsDoesNotStopTheGather) {
  Start(4);
  const std::string target = nodes_[2]->server.Endpoint();
  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::vector<UniqueFD> held;
    while (!stop) {
      std::erase_if(held, [](const UniqueFD& fd) {
        struct pollfd p = {fd.get(), POLLRDHUP, 0};
        return ::poll(&p, 1, 0) != 0;  // closed by the agent
      });
      while (held.size() < PeerServer::kMaxUnauthenticated + 16) {
        UniqueFD fd = testing::ConnectRaw(target);
        if (!fd.valid() || ::send(fd.get(), "F", 1, MSG_NOSIGNAL) != 1) break;
        held.push_back(std::move(fd));
        opened++;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  while (opened < PeerServer::kMaxUnauthenticated + 16)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ExpectEveryAgentGathersAll();
  stop = true;
  flood.join();
  EXPECT_GT(nodes_[2]->server.refused(), 0u);
}

TEST_F(GatherNet, ADeadAgentIsAnErrorNamingIt) {
  Start(4);
  nodes_[3]->server.Stop();
  auto st = RunAll();
  for (uint32_t r = 0; r < 3; r++) {
    ASSERT_FALSE(st[r].ok()) << r;
    EXPECT_NE(st[r].ToString().find("indexes of rank 3"), std::string::npos) << st[r].ToString();
  }
}

TEST_F(GatherNet, APointerLargerThanItsShardsIsRefusedBeforeAnyFetch) {
  Start(2);
  auto st = RunAll({1 << 20, 10});
  EXPECT_FALSE(st[0].ok());
  EXPECT_NE(st[0].ToString().find("more than its shards hold"), std::string::npos)
      << st[0].ToString();
}

}  // namespace
}  // namespace fanstore::agent
