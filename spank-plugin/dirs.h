// The job's directories in shared places (/dev/shm, /tmp), where any user can plant a file, a
// directory or a symlink under a name we use before we do.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/private_dir.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore::spank {

// As root (the prolog, the batch step): makes `path` a directory that root created, of
// uid:gid, mode 0700. An object planted there by someone else is moved aside (to
// PATH.planted-XXXXXX, atomically exchanged, never deleted: it is not ours); an existing 0700
// directory of uid's own is kept (another node's claim on a shared /dev/shm, or a later step).
// When the parent is not root's, nothing is done: only its owner could have planted there, and
// root must not work in a directory a user controls. *moved names what was moved aside, if any.
[[nodiscard]] Status ClaimDir(const std::string& path, uid_t uid, gid_t gid, std::string* moved);

using fanstore::EnsureOwnDir;  // as the user: common/private_dir.h

// Gives the calling process (a task: it and its children) a mount namespace of its own, in which
// nothing mounted reaches the node's (whose / is usually shared), while the node's later mounts
// still reach the task. The two views below are made there.
Status TaskNamespace();

// In the task's own namespace (TaskNamespace): makes `dir` a read-only bind mount of itself, so
// that no process of the job, root or not, changes the staged copy by any route (a write to the
// local path, a shell in a directory of it, a static binary): EROFS. `dir` must be a directory
// owned by `uid`; it is opened without following a symlink and mounted through its descriptor.
Status ReadOnlyView(const std::string& dir, uid_t uid);

// In the task's own namespace: a FUSE mount at `mount` (absolute and clean) for uid's processes,
// whose /dev/fuse descriptor the agent then serves (the kernel-visible view, agent/kernel_view.h).
// The mount point is `mount` itself when it is a directory; otherwise its deepest existing
// ancestor must be an empty directory (mount_prefix, say /fanstore, made by the administrator),
// which gets a small tmpfs holding the missing components, in this namespace only. No component
// may be a symlink. The node's file systems are never written.
Result<UniqueFD> KernelViewMount(const std::string& mount, uid_t uid, gid_t gid);

}  // namespace fanstore::spank
