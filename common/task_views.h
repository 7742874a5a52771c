// A task's two views, made in a mount namespace of its own by the SPANK plugin (as root, before
// the task becomes the user) and by `fanstore run --kernel-view` (as root, or in a user namespace
// of the command's own): the node's staged copy read-only, and the kernel-visible view, a FUSE
// mount at the dataset's virtual path for one user's processes, served by the agent, to which
// the /dev/fuse descriptor is handed (agent/kernel_view.h).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore {

// Mounts an empty FUSE file system of type fuse.fanstore on the directory `target` (a
// descriptor, O_PATH will do), read-only, nosuid and nodev, with the kernel checking mode bits
// (default_permissions) and letting every process in (allow_other: its server, the agent,
// answers only `uid` and root; the callers mount in a task's private namespace). Returns the
// /dev/fuse descriptor (close-on-exec) whose reader serves it; every access waits until one does,
// and fails with ENOTCONN once the last copy of the descriptor is closed. Needs CAP_SYS_ADMIN.
Result<UniqueFD> MountFuse(int target, uid_t uid, gid_t gid);

// Gives the calling process (and its later children) a mount namespace of its own, in which
// nothing mounted reaches the node's (whose / is usually shared), while the node's later mounts
// still reach it. Must be called before the process has threads.
Status PrivateMountNamespace();

// In the task's own namespace (PrivateMountNamespace): makes `dir` a read-only bind mount of
// itself, so that no process of the job, root or not, changes the staged copy by any route (a
// write to the local path, a shell in a directory of it, a static binary): EROFS. The agent,
// outside that namespace, keeps its writable view. `dir` must be a
// directory owned by `uid`; it is opened without following a symlink and mounted through its
// descriptor.
Status ReadOnlyView(const std::string& dir, uid_t uid);

// In a private mount namespace: MountFuse at `mount` (absolute and clean). The mount point is
// `mount` itself when it is a directory; otherwise its deepest existing ancestor must be an
// empty directory (the plugin's mount_prefix, /fanstore by default, made by the package), which
// gets a small tmpfs holding the missing components, in this namespace only. No component may be
// a symlink. The node's file systems are never written.
Result<UniqueFD> MountKernelView(const std::string& mount, uid_t uid, gid_t gid);

// In a private mount namespace, as root: the kernel-visible view as a read-only, nosuid, nodev
// bind mount of directory `dir` (the agent's mounted EROFS image, when it holds the whole
// dataset) at `mount`, made as MountKernelView makes its mount point. The kernel then serves the
// view itself, with no FUSE round trip. `dir` is opened without following a symlink.
Status BindKernelView(const std::string& mount, const std::string& dir);
// The same from a descriptor of the directory, opened (O_PATH) however the caller trusts it.
Status BindKernelView(const std::string& mount, int dir);

// Hands the view's /dev/fuse descriptor to the agent at `socket` (proto kServeView) and waits
// until it serves it. The caller then closes its own copy.
Status HandOverView(const std::string& socket, int dev);

}  // namespace fanstore
