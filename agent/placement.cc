// Rendezvous hashing over (shard, rank).
#include "agent/placement.h"

#include <algorithm>

#include "common/hash.h"

namespace fanstore::agent {
namespace {

uint64_t Weight(uint32_t shard, uint32_t rank) {
  uint32_t key[2] = {shard, rank};
  return Xxh3(key, sizeof key);
}

}  // namespace

std::vector<uint32_t> Holders(uint32_t shard, uint32_t size, uint32_t replicas) {
  if (size == 0) return {};
  replicas = std::clamp<uint32_t>(replicas, 1, size);
  std::vector<uint32_t> ranks(size);
  for (uint32_t r = 0; r < size; r++) ranks[r] = r;
  std::partial_sort(ranks.begin(), ranks.begin() + replicas, ranks.end(), [&](uint32_t a, uint32_t b) {
    uint64_t wa = Weight(shard, a), wb = Weight(shard, b);
    return wa != wb ? wa > wb : a < b;
  });
  ranks.resize(replicas);
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
