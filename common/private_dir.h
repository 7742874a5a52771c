// A directory of the calling user's own, in a place others may have planted things first.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore {

// `path` (absolute) opened as a directory (O_RDONLY, or O_PATH with `path_only`) by a walk from
// /, one component at a time by descriptor, never through a symlink. Every directory on the way,
// `path` included, must be one that no user but root and `uid` can replace or rename: owned by
// root or by `uid`, and writable by group or others only with the sticky bit (as /tmp). So what
// is later opened by path below it is what was checked here. A symlink anywhere is refused, an
// admin's too: the error names the component and asks for the real path.
Result<UniqueFD> OpenTrustedDir(const std::string& path, uid_t uid, bool path_only = false);

// `path` as a private directory of this user's: created 0700 when missing (*created then
// true), else taken only when it is a directory (not a symlink) owned by this user, checked
// through a descriptor, and made 0700. Its parent must pass OpenTrustedDir for this user, so
// another user can neither plant it first nor swap it later. Fails, naming the owner, when
// something else is there.
Status EnsureOwnDir(const std::string& path, bool* created = nullptr);

// Whether `path` is a directory (not a symlink) that is the root of a file system of its own:
// the SPANK plugin's per-job tmpfs at a job's local directory.
bool IsMountPoint(const std::string& path);

}  // namespace fanstore
