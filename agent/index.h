// Every shard's index entries, by shard, as the agent holds them: views of the entries read at
// open (our own shards: no second copy) or decoded from the metadata exchange (the others').
// Whoever builds one keeps the viewed vectors alive and in place for as long as it is used.
#pragma once

#include <span>
#include <vector>

#include "format/format.h"

namespace fanstore::agent {

using Index = std::vector<std::span<const format::IndexEntry>>;

}  // namespace fanstore::agent
