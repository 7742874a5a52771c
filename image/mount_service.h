// The image's mounter under Slurm (issue 31): the agent runs as the job user and cannot mount,
// so the plugin, as root in the agent step's task before it becomes the agent, forks a small
// root process that serves it one mount (image/mount.h) and its unmount, over a socket pair.
//
//   agent                                  mount service (root, the agent's child)
//   'M' + descriptors of tree and blob  -> opens the job's local directory as a trusted walk,
//                                          its data/ without following links, makes a directory
//                                          of root's there for the metadata, MountTree on data/
//                                       <- '0', or '1' and why
//   'U' (or the socket's end: the agent  -> detaches the image, exits
//   died; or SIGTERM)
//
// The service takes nothing else from the agent: no path, no owner. The image is mounted in the
// agent step's mount namespace (the node's, that every step of the job shares), at the data
// root the table names, so the agent, the library and the FUSE view all read it by path.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore::image {

inline constexpr char kMetaDirName[] = ".image-meta";  // root's, briefly, in the local dir

// The plugin's side: forks the service for `local_dir` of uid:gid. Returns the agent's end of
// the socket pair (not close-on-exec: the agent inherits it).
Result<UniqueFD> StartMountService(const std::string& local_dir, uid_t uid, gid_t gid);

// The service's loop, in the forked child (exposed for tests): returns when it is done.
void ServeMounts(int sock, const std::string& local_dir, uid_t uid, gid_t gid);

// The agent's side.
Status AskMount(int sock, int tree_fd, int blob_fd);
Status AskUnmount(int sock);

// The root of the image mounted on local_dir/data, found by a walk that follows no symlink
// (OpenTrustedDir for uid) and checked to be an EROFS root, which only root can have mounted; an
// invalid descriptor when there is none.
UniqueFD FindImage(const std::string& local_dir, uid_t uid);

// The epilog's: an image still mounted on local_dir/data (its service was killed) is detached.
// *detached says whether one was.
Status DetachImage(const std::string& local_dir, uid_t uid, bool* detached);

}  // namespace fanstore::image
