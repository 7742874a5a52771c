#include "common/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fanstore::run_dir {
namespace {

UniqueFD OpenDir(const std::string& dir) {
  return UniqueFD(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

}  // namespace

Result<UniqueFD> HoldAlive(const std::string& dir) {
  UniqueFD fd = OpenDir(dir);
  if (!fd.valid()) return Status::FromErrno("open " + dir, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
    return errno == EWOULDBLOCK ? Status::InvalidArgument(dir + " is in use by another agent")
                                : Status::FromErrno("lock " + dir, errno);
  return fd;
}

bool AgentAlive(const std::string& dir) {
  UniqueFD fd = OpenDir(dir);
  if (!fd.valid()) return false;
  return ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

std::string State(const std::string& dir) {
  UniqueFD fd(::open((dir + "/" + kStatusName).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return "";
  std::string text(256 << 10, '\0');  // the status of thousands of shards still fits
  size_t len = 0;
  for (ssize_t n; len < text.size() && (n = ::read(fd.get(), text.data() + len, text.size() - len)) > 0;)
    len += static_cast<size_t>(n);
  text.resize(len);
  // The state is a plain word written without spaces: no JSON parser needed here.
  const size_t p = text.find("\"state\":\"");
  if (p == std::string::npos) return "";
  const size_t end = text.find('"', p + 9);
  std::string state = end == std::string::npos ? "" : text.substr(p + 9, end - p - 9);
  if ((state == "starting" || state == "staging" || state == "ready") && !AgentAlive(dir)) return "dead";
  return state;
}

}  // namespace fanstore::run_dir
