#include "common/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"

namespace fanstore {

Status EnsureOwnDir(const std::string& path, bool* created) {
  const bool made = ::mkdir(path.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) return Status::FromErrno("create " + path, errno);
  if (created) *created = made;
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0)
    return Status::Permission(
        path + " exists and is not a directory (a symlink or a file planted there?)");
  if (st.st_uid != ::geteuid())
    return Status::Permission(path + " belongs to uid " + std::to_string(st.st_uid) +
                              ", not to this user");
  if ((st.st_mode & 077) != 0 && ::fchmod(fd.get(), 0700) != 0)
    return Status::FromErrno("chmod 0700 " + path, errno);
  return Status::OK();
}

bool IsMountPoint(const std::string& path) {
  struct stat st, up;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::lstat((path + "/..").c_str(), &up) == 0 && up.st_dev != st.st_dev;
}

}  // namespace fanstore
