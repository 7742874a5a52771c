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
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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

// The targets of a shard's symlinks and hard links, by path.
using Links = std::vector<std::pair<std::string, std::string>>;
// A shard this agent publishes: as opened (footer, stored index), and its links' targets.
struct Published {
  const format::ShardFile* shard;
  const Links* links;
};
// This agent's message: the shards it is primary for.
std::string Encode(const std::string& endpoint, const std::vector<Published>& primary);

// A large exchange's first round carries a pointer in place of each agent's message: its peer
// endpoint, and its message's size and XXH3-128. The messages then travel over the peer service
// (agent/gather.h), each checked against its pointer.
struct Pointer {
  std::string endpoint;
  uint64_t size = 0;
  uint64_t hash_lo = 0, hash_hi = 0;
  bool Matches(std::string_view message) const;
};
std::string EncodePointer(const std::string& endpoint, std::string_view message);
// Round one's values: an error for an agent that failed (its head), as Decode gives; else by
// rank, the pointer, or nullopt where the value is the message itself.
Result<std::vector<std::optional<Pointer>>> ReadPointers(const std::vector<std::string>& all);

// What every agent's message says, put together.
struct Decoded {
  // By shard: its stored index, a view into the messages (which must outlive it) or, for a
  // shard held here that another rank published, into our own, with the footer it is checked
  // against when decoded (ours for a shard held here; else the publisher's, checked for
  // sanity).
  std::vector<StoredIndex> index;
  std::unordered_map<std::string, std::string> links;  // symlink targets by path
  std::vector<std::string> endpoints;                  // by rank ("" without a peer service)
  uint64_t bytes = 0;                                  // received, for the stats
};
// Reads `all` (one message per rank) for a dataset of `nshards` shards; `own` are the shards
// held here, whose index_stored must be kept (and outlive the result) where another rank is
// their primary. Fails when a message is malformed, an agent failed, or a shard is published twice
// or never. The indexes themselves are decoded (and checked) as the table is built.
Result<Decoded> Decode(const std::vector<std::string_view>& all, uint32_t nshards, uint32_t self,
                       const std::vector<const format::ShardFile*>& own);
Result<Decoded> Decode(const std::vector<std::string>& all, uint32_t nshards, uint32_t self,
                       const std::vector<const format::ShardFile*>& own);

// Fails when a symlink's target leads out of the dataset, resolved through the other links
// too, not only lexically; `is_dir` says which paths are directories.
Status CheckLinks(const std::unordered_map<std::string, std::string>& links,
                  const std::function<bool(const std::string&)>& is_dir);

}  // namespace fanstore::agent::exchange
