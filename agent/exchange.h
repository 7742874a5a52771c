// The metadata exchange's message: what each agent tells every other through PMIx. Every agent
// publishes the indexes (and symlink targets) of the shards it is primary for, and its peer
// endpoint; each then decodes every agent's message, validating a peer's bytes as strictly as a
// shard read from disk.
//
//   u32 magic | u32 version | u32 ok | str error | str endpoint | u32 records |
//     records: u32 shard | u64 shard file size | footer (64 B) | str stored index |
//              u32 links | (str path, str target)*
//   str = u32 length + bytes, integers little-endian (host order on the job's nodes).
// The second round (did every agent stage its share?) sends the head alone: magic to error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/index.h"
#include "common/status.h"
#include "format/format.h"
#include "format/shard.h"

namespace fanstore::agent::exchange {

// The head alone: whether this agent succeeded so far and, if not, why.
std::string EncodeHead(const Status& st);
// Checks a head from `rank`: Corruption when malformed, Aborted with the agent's own message
// when it failed.
Status CheckHead(std::string_view message, uint32_t rank);

// This agent's message: `primary` are the shards it publishes (their indexes were read and
// checked at open); their symlink targets are read from the shards with `dict`.
Result<std::string> Encode(const std::string& endpoint,
                           const std::vector<const format::ShardFile*>& primary,
                           const format::Dictionary& dict);

// What every agent's message says, put together.
struct Decoded {
  // By shard: our own shards' entries are views of `own`'s (which must outlive them); the
  // others' are decoded into `decoded` (moving a Decoded keeps the views valid).
  Index index;
  std::vector<std::vector<format::IndexEntry>> decoded;  // by shard; empty for our own
  std::unordered_map<std::string, std::string> links;    // symlink targets by path
  std::vector<std::string> endpoints;                    // by rank ("" without a peer service)
  uint64_t bytes = 0;                                    // received, for the stats
};
// Decodes `all` (one message per rank) for a dataset of `nshards` shards. The shards in `own`
// (held here, their indexes read and checked at open) are viewed, not decoded again, whoever
// published them.
// Fails when a message is malformed, an agent failed, a shard is published twice or never, or
// a symlink leads out of the dataset.
Result<Decoded> Decode(const std::vector<std::string>& all, uint32_t nshards, uint32_t self,
                       const std::vector<const format::ShardFile*>& own);

}  // namespace fanstore::agent::exchange
