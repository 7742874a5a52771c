// Committing one finished output file to the parallel file system (issue 29: checkpoints), so
// that its final name never holds a partial or corrupt file, whatever happens meanwhile: a crash
// of the agent or the node, a full or unreachable file system, a source rewritten as it is copied.
//
// The copy goes to a temporary name beside the final one (`.NAME.fanstore-XXXXXX`, 0600), is
// fsynced, read back (its cached pages dropped first, so that a network file system's client
// asks its servers; several 1 MiB pieces at once) and checked piece by piece against the hashes
// of what was read from the source, gets its
// final mode (0666 less the user's umask), and is renamed into place; then its directory is
// fsynced. A source whose size or modification time moved while it was copied is not committed
// (Aborted): it is being rewritten, and its next close drains it again, so the last complete
// version wins. Every path component, on both sides, is opened by descriptor without following
// symlinks.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace fanstore::output {

// What went under the final name.
struct Committed {
  uint64_t size = 0;
  uint64_t xxh3 = 0;        // of the bytes under the final name (read back, piece by piece)
  int64_t mtime_ns = 0;     // the source's modification time when it was read
  bool name_taken = false;  // without `replace`, the final name existed: nothing committed
};

// Copies `rel` (a canonical relative path, common/path.h) from the directory open as `src` to
// `as` (likewise) below the directory open as `dst`, making the missing directories there (0777
// less `umask`). Without `replace` an existing final name is left alone (name_taken). Aborted:
// the source changed during the copy, or `cancel` was set (nothing committed). Other errors name
// the file; the temporary is removed on every failure.
struct CommitRequest {
  int src = -1, dst = -1;
  std::string rel, as;
  mode_t umask = 022;
  bool replace = true;
  const std::atomic<bool>* cancel = nullptr;
  // Called after each piece (1 MiB) copied or read back, with the time it took, never by two
  // threads at once: the drainer pauses there to yield to the job (drainer.h).
  std::function<void(std::chrono::steady_clock::duration)> pace;
};
[[nodiscard]] Result<Committed> CommitFile(const CommitRequest& req);

// The prefix of the temporary names, so that a later drain can tell (and remove) what a killed
// one left: `.NAME` + kTempMarker + 6 characters.
inline constexpr char kTempMarker[] = ".fanstore-";

}  // namespace fanstore::output
