#include "common/fuse_mount.h"

#include <fcntl.h>
#include <sys/mount.h>

#include <cerrno>
#include <string>

namespace fanstore {

Result<UniqueFD> MountFuse(int target, uid_t uid, gid_t gid) {
  UniqueFD dev(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (!dev.valid()) return Status::FromErrno("open /dev/fuse", errno);
  const std::string opts = "fd=" + std::to_string(dev.get()) +
                           ",rootmode=40000,user_id=" + std::to_string(uid) +
                           ",group_id=" + std::to_string(gid) + ",default_permissions";
  const std::string where = "/proc/self/fd/" + std::to_string(target);
  if (::mount("fanstore", where.c_str(), "fuse.fanstore", MS_RDONLY | MS_NOSUID | MS_NODEV,
              opts.c_str()) != 0)
    return Status::FromErrno("mount a FUSE file system", errno);
  return dev;
}

}  // namespace fanstore
