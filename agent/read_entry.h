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

// The --read-entry mode (argv[0] is "--read-entry"): writes the file to stdout. Exit status 0, or
// with the cause on stderr: 3 the dataset cannot be read (gone, unreachable), 4 its bytes are
// damaged, 2 bad arguments.
int ReadEntryMain(int argc, char** argv);

}  // namespace fanstore::agent
