// Deterministic shard placement: every agent computes the same shard-to-nodes map from
// (shard, size, replicas) alone, by rendezvous (highest-random-weight) hashing. Adding a node
// moves only the shards it wins; no coordination is needed.
#pragma once

#include <cstdint>
#include <vector>

namespace fanstore::agent {

// The ranks holding `shard`, best first; replicas is clamped to [1, size].
// The first rank is the shard's primary: it publishes the shard's index in the exchange.
std::vector<uint32_t> Holders(uint32_t shard, uint32_t size, uint32_t replicas);

// The shards that `rank` holds, out of `shards`.
std::vector<uint32_t> ShardsOf(uint32_t rank, uint32_t shards, uint32_t size, uint32_t replicas);

}  // namespace fanstore::agent
