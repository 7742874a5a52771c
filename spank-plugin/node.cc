// The node and the process (see node.h).
#include "spank-plugin/node.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/env.h"
#include "spank-plugin/job.h"

extern char** environ;

namespace fanstore::spank {

std::optional<std::string> ProcessGetenv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::vector<std::string> ProcessEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; e++) out.emplace_back(*e);
  return out;
}

Result<std::string> NodeName() {
  std::string node;
  if (auto slurm = ProcessGetenv(env::kSlurmdNodeName)) {
    node = *slurm;
  } else {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) return Status::FromErrno("gethostname", errno);
    node = host;
    node = node.substr(0, node.find('.'));
  }
  if (!IsSafeNodeName(node)) return Status::InvalidArgument("unusable node name '" + node + "'");
  return node;
}

Result<std::string> UserName(uid_t uid) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd pw, *result = nullptr;
  const int rc = ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &result);
  if (rc != 0 || result == nullptr)
    return Status::NotFound("no user name for uid " + std::to_string(uid));
  return std::string(pw.pw_name);
}

}  // namespace fanstore::spank
