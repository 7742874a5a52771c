// One file of a dataset, read straight from its shard: what clients fall back to when the
// node's agent is gone (the interceptor runs `fanstore-agent --read-entry DS SHARD INDEX`
// with its output on a memfd). Three small reads for the shard's header, footer and index,
// then the file's frame as a stream, verified against its XXH3.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fanstore::agent {

Status ReadEntry(const std::string& dataset, uint32_t shard, uint32_t index,
                 const std::function<Status(std::string_view)>& sink);

}  // namespace fanstore::agent
