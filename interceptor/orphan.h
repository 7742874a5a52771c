// Opens when the node's agent is gone (it died, or was killed): the table stays mapped, so
// the namespace still answers, and a file's data comes from where it still is.
#pragma once

#include "common/table.h"

namespace fanstore::interceptor {

// Regular file e's data without the agent: the staged copy or the cache file when they are
// there, else the file read from its shard in the dataset directory by the agent's program
// (`--read-entry`, into a sealed memfd). Returns a descriptor with O_CLOEXEC, or -errno:
// ESTALE when the dataset cannot be read either, EIO when its bytes are damaged. Says once,
// on stderr, that the agent is gone.
int OpenWithoutAgent(const table::Entry& e, int keep_flags) noexcept;

}  // namespace fanstore::interceptor
