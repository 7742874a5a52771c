// What /proc/PID/mountinfo says, read without touching the file systems themselves (a user's
// FUSE daemon that does not answer cannot hang the reader).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fanstore {

struct MountEntry {
  int id = 0, parent = 0;
  dev_t dev = 0;             // major:minor of the file system
  std::string mount_point;   // as seen from the reader's root, unescaped
  std::string options;       // the mount's own ("rw,nosuid,nodev")
  std::string type, source;  // "tmpfs", "fuse.sshfs"; the source as given to mount(2)
};

// The mounts of `text` (a mountinfo file's content), in its order: a mount stacked on another at
// the same point comes after it. Malformed lines are skipped.
std::vector<MountEntry> ParseMountInfo(const std::string& text);

// The mounts of this process's mount namespace at `path`, bottom first.
std::vector<MountEntry> MountsAt(const std::string& path);
// Detaches every mount of type `type` strictly below directory `dir` in this process's mount
// namespace, the deepest first (root only; what a killed agent left mounted in its local
// directory). The number detached.
int DetachMountsBelow(const std::string& dir, const std::string& type);

// A mount of file system `dev` in another mount namespace than this process's: a process in that
// namespace and where it is mounted there.
struct MountCopy {
  pid_t pid = 0;
  std::string mount_point;
};
// Every mount namespace on the node (one process of each, from /proc) that has `dev` mounted,
// this process's own aside.
std::vector<MountCopy> MountsElsewhere(dev_t dev);

}  // namespace fanstore
