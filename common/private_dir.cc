#include "common/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/path.h"

namespace fanstore {
namespace {

// Why a directory owned by `st.st_uid` with `st.st_mode` is not one only root and `uid` control,
// or "" when it is.
std::string Untrusted(const struct stat& st, uid_t uid) {
  if (st.st_uid != 0 && st.st_uid != uid)
    return "belongs to uid " + std::to_string(st.st_uid) + ", neither root nor uid " +
           std::to_string(uid);
  if ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0)
    return "is writable by other users without the sticky bit (chmod go-w, or +t, fixes it)";
  return "";
}

}  // namespace

Result<UniqueFD> OpenTrustedDir(const std::string& path, uid_t uid, bool path_only) {
  if (path.empty() || path.front() != '/')
    return Status::InvalidArgument(path + " is not an absolute path");
  const int mode = (path_only ? O_PATH : O_RDONLY) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFD cur(::open("/", mode));
  std::string seen = "/";
  for (size_t pos = 0;;) {
    struct stat st;
    if (!cur.valid() || ::fstat(cur.get(), &st) != 0)
      return errno == ELOOP || errno == ENOTDIR
                 ? Status::Permission(seen +
                                      " is a symlink or not a directory (give the real "
                                      "path: no symlink is followed here)")
                 : Status::FromErrno("open " + seen, errno);
    if (std::string why = Untrusted(st, uid); !why.empty())
      return Status::Permission(seen + " " + why + ", who could swap what is below it");
    while (pos < path.size() && path[pos] == '/') pos++;
    if (pos == path.size()) return cur;
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    const std::string name = path.substr(pos, end - pos);
    seen = path.substr(0, end);
    cur.Reset(::openat(cur.get(), name.c_str(), mode));
    pos = end;
  }
}

Status EnsureOwnDir(const std::string& given, bool* created) {
  const std::string path = TrimTrailingSlashes(Absolute(given));
  const size_t slash = path.rfind('/');
  const std::string leaf = path.substr(slash + 1);
  if (leaf.empty() || leaf == "." || leaf == "..")
    return Status::InvalidArgument(given + " does not name a directory");
  auto parent = OpenTrustedDir(slash == 0 ? "/" : path.substr(0, slash), ::geteuid(), true);
  if (!parent.ok()) return parent.status().Prefixed("the parent of " + given);
  const bool made = ::mkdirat(parent->get(), leaf.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) return Status::FromErrno("create " + given, errno);
  if (created) *created = made;
  UniqueFD fd(
      ::openat(parent->get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0)
    return Status::Permission(
        given + " exists and is not a directory (a symlink or a file planted there?)");
  if (st.st_uid != ::geteuid())
    return Status::Permission(given + " belongs to uid " + std::to_string(st.st_uid) +
                              ", not to this user");
  if ((st.st_mode & 077) != 0 && ::fchmod(fd.get(), 0700) != 0)
    return Status::FromErrno("chmod 0700 " + given, errno);
  return Status::OK();
}

bool IsMountPoint(const std::string& path) {
  struct stat st, up;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::lstat((path + "/..").c_str(), &up) == 0 && up.st_dev != st.st_dev;
}

}  // namespace fanstore
