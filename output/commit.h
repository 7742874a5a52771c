// Committing one finished output file to the parallel file system (issue 29: checkpoints), so
// that its final name never holds a partial or corrupt file, whatever happens meanwhile: a crash
// of the agent or the node, a full or unreachable file system, a source rewritten as it is copied.
//
// The copy goes to a temporary name beside the final one (`.NAME.fanstore-XXXXXX`, 0600), is
// fsynced, read back and checked against the hash of what was read from the source, gets its
// final mode (0666 less the user's umask), and is renamed into place; then its directory is
// fsynced. A source whose size or modification time moved while it was copied is not committed
// (Aborted): it is being rewritten, and its next close drains it again, so the last complete
// version wins. Every path component, on both sides, is opened by descriptor without following
// symlinks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace fanstore::output {

// What went under the final name.
struct Committed {
  uint64_t size = 0;
  uint64_t xxh3 = 0;     // of the bytes under the final name, read back
  int64_t mtime_ns = 0;  // the source's modification time when it was read
};

// Copies `rel` (a canonical relative path, common/path.h) from the directory open as
// `src` to the same path below the directory open as `dst`, making the missing directories there
// (0777 less `umask`). Aborted: the source changed during the copy (nothing committed). Other
// errors name the file; the temporary is removed on every failure.
[[nodiscard]] Result<Committed> CommitFile(int src, int dst, const std::string& rel, mode_t umask);

// The prefix of the temporary names, so that a later drain can tell (and remove) what a killed
// one left: `.NAME` + kTempMarker + 6 characters.
inline constexpr char kTempMarker[] = ".fanstore-";

}  // namespace fanstore::output
