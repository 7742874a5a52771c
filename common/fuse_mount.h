// A FUSE mount made by root for one user's processes, served by a descriptor handed on to an
// unprivileged daemon (the agent's kernel-visible view, agent/kernel_view.h).
#pragma once

#include <sys/types.h>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore {

// Mounts an empty FUSE file system of type fuse.fanstore on the directory `target` (a
// descriptor, O_PATH will do), read-only, nosuid and nodev, with the kernel checking mode bits
// (default_permissions) and only `uid`'s processes let in (no allow_other). Returns the
// /dev/fuse descriptor (close-on-exec) whose reader serves it; every access waits until one does,
// and fails with ENOTCONN once the last copy of the descriptor is closed. Needs CAP_SYS_ADMIN.
Result<UniqueFD> MountFuse(int target, uid_t uid, gid_t gid);

}  // namespace fanstore
