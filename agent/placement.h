// Deterministic shard placement: every agent computes the same shard-to-nodes map from
// (shard, size, replicas) alone, with no coordination. Shard s is held by ranks s, s+1, ...,
// s+R-1 (mod size): since `fanstore pack` balances shards by bytes, every node stages the same
// share to within one shard. (Rendezvous hashing, which the first version used, keeps most
// shards in place when the node set changes, but a job's node set never changes, and with
// few shards per node it is lopsided: 41% against 59% of a 34-shard dataset on 2 nodes, and
// all of a 2-shard dataset on one of 2 nodes.)
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
