// The large metadata exchange's messages, gathered over the peer service (docs/design.md, "Large
// indexes travel over the peer service").
//
// PMIx's fence carries each agent's pointer (exchange::Pointer: its endpoint, and its message's
// size and XXH3-128); the agents then pull the messages from each other in ceil(log2 N) steps
// (Bruck's allgather): in step k, agent i asks agent i + 2^k for the messages of ranks i + 2^k to
// i + 2^(k+1) - 1 (modulo N), which that agent holds once its own step k - 1 is done. A node
// receives every other node's message once, over log2 N connections; PMIx's direct modex took
// N - 1 requests through the other nodes' slurmd. Whoever forwards a message, it is checked
// against its pointer; one that does not come in time, or does not match, is asked of the agent
// that published it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/exchange.h"
#include "agent/peer.h"
#include "common/status.h"

namespace fanstore::agent {

class Gather {
 public:
  // Before the pointers are published: this agent's own message, served from now on.
  void Begin(uint32_t rank, uint32_t size, std::string mine);
  const std::string& mine() const { return *msgs_[rank_]; }
  // The peer service's MessageFn: rank's message once it is here (at most `wait_ms`).
  int Wait(uint32_t rank, int wait_ms, std::shared_ptr<const std::string>* out);
  // Every rank's message. `pointers[r]`: what rank r published in the fence, a pointer, or
  // nullopt where `in_fence[r]` is the message itself. `bound[r]`: the most rank r's message
  // can hold (its shards' bytes), checked before anything is fetched. What the steps did not
  // bring is asked of its publisher, again until the wait's deadline, then is an error naming it.
  Status Run(PeerClient* peers, const std::vector<std::optional<exchange::Pointer>>& pointers,
             std::vector<std::string>* in_fence, const std::vector<uint64_t>& bound);
  // Views of every rank's message, valid until End.
  std::vector<std::string_view> Views();
  // Ends it: waiting requests get ESHUTDOWN, the messages are freed.
  void End();

  // The ranks agent `rank` asks in each step, as (agent, first rank, count): for tests.
  struct Step {
    uint32_t from, first, count;
  };
  static std::vector<Step> Schedule(uint32_t rank, uint32_t size);
  void SetWaitForTest(int ms) { wait_ms_ = ms; }

 private:
  // Keeps rank r's message `m` if it matches its pointer (and is not here yet).
  Status Keep(uint32_t r, std::string m, uint32_t via);
  bool Has(uint32_t r);
  bool Ended();

  std::mutex mu_;
  std::condition_variable arrived_;
  uint32_t rank_ = 0, size_ = 0;
  bool ended_ = false;
  int wait_ms_ = PeerServer::kMessageWaitMs + 5000;  // the server answers first
  std::vector<std::shared_ptr<const std::string>> msgs_;
  std::vector<std::optional<exchange::Pointer>> pointers_;
};

}  // namespace fanstore::agent
