// The job's directories in shared places (/dev/shm, /tmp), where any user can plant a file, a
// directory or a symlink under a name we use before we do.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/private_dir.h"
#include "common/status.h"
#include "common/task_views.h"
#include "common/unique_fd.h"

namespace fanstore::spank {

// As root (the prolog, the batch step): makes `path` a directory that root created, of
// uid:gid, mode 0700. An object planted there by someone else is moved aside (to
// PATH.planted-XXXXXX, atomically exchanged, never deleted: it is not ours); an existing 0700
// directory of uid's own is kept (another node's claim on a shared /dev/shm, or a later step).
// When the parent is not root's, nothing is done: only its owner could have planted there, and
// root must not work in a directory a user controls. *moved names what was moved aside, if any.
[[nodiscard]] Status ClaimDir(const std::string& path, uid_t uid, gid_t gid, std::string* moved);

// The job's own file system at the local directory (plugstack local_fs=auto). When the file
// system `path` (a directory ClaimDir made) is on is tmpfs, the node's local storage is memory
// already: as root (the prolog), MountJobFs mounts a tmpfs of the job's own there, of uid:gid,
// mode 0700, nosuid, nodev (and noexec where its parent is), limited to the space and inodes that
// were free under it. Its mount point becomes root's, so that the user cannot move it out of the
// epilog's reach. At the end DropJobFs (root, the epilog, after the job's processes are gone)
// unmounts it, which frees a million files in one call instead of one unlink each, and removes
// the mount point; still in use, it is detached and an error says so. Both work through
// descriptors opened without following symlinks, below a parent of root's, so a user who swaps
// the directory for a symlink moves no mount anywhere else. *mounted / *dropped say whether
// anything was done; a file system that is not tmpfs, or a parent that is not root's (or that
// others may write without the sticky bit), is no error (nothing is done).
[[nodiscard]] Status MountJobFs(const std::string& path, uid_t uid, gid_t gid, bool* mounted);
[[nodiscard]] Status DropJobFs(const std::string& path, uid_t uid, bool* dropped);

using fanstore::EnsureOwnDir;  // as the user: common/private_dir.h

// A task's own mount namespace, and the two views made there: the staged copy read-only, and
// the kernel-visible view (common/task_views.h).
using fanstore::HandOverView;
using fanstore::MountKernelView;
using fanstore::PrivateMountNamespace;
using fanstore::ReadOnlyView;

// Whether the kernel-visible view may be mounted at `mount` for a user: only strictly under
// `prefix` (the admin's mount_prefix), which must be a directory of root's that nobody else can
// write. Anywhere else a user could lay the dataset over /etc or /usr/lib in their task, where a
// setuid program would read it as root's (sudoers, ld.so.preload). The reason when not.
Status KernelViewAllowed(const std::string& mount, const std::string& prefix);

}  // namespace fanstore::spank
