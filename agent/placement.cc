// Round-robin placement of shards on ranks.
#include "agent/placement.h"

#include <algorithm>

namespace fanstore::agent {

std::vector<uint32_t> Holders(uint32_t shard, uint32_t size, uint32_t replicas) {
  if (size == 0) return {};
  replicas = std::clamp<uint32_t>(replicas, 1, size);
  std::vector<uint32_t> ranks(replicas);
  for (uint32_t k = 0; k < replicas; k++)
    ranks[k] = static_cast<uint32_t>((uint64_t{shard} + k) % size);
  return ranks;
}

std::vector<uint32_t> ShardsOf(uint32_t rank, uint32_t shards, uint32_t size, uint32_t replicas) {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < shards; s++) {
    auto h = Holders(s, size, replicas);
    if (std::find(h.begin(), h.end(), rank) != h.end()) out.push_back(s);
  }
  return out;
}

}  // namespace fanstore::agent
