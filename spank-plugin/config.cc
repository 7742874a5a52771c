// Plugstack argument parsing (see config.h).
#include "spank-plugin/config.h"

#include <limits.h>
#include <stdlib.h>

#include "common/path.h"
#include "common/text.h"

#include <charconv>
#include <string_view>

namespace fanstore::spank {
namespace {

constexpr const char* kKnownKeys =
    "agent, preload, srun, local_dir, run_dir, mount_prefix, stagein_timeout, replicas, "
    "cache_size, kernel_view, local_fs, drain_timeout, image";

}  // namespace

Config DefaultConfig() {
  Config c;
  c.agent = FANSTORE_DEFAULT_AGENT;
  c.preload = FANSTORE_DEFAULT_PRELOAD;
  c.srun = FANSTORE_DEFAULT_SRUN;
  c.local_dir = "/tmp";
  c.run_dir = "/dev/shm";
  c.mount_prefix = "/fanstore";
  c.stagein_timeout = 600;
  c.replicas = "1";  // split across the nodes; `all` replicates fully
  return c;
}

bool IsValidReplicas(const std::string& value) {
  return value == "all" || ParseInt(value, 1, 65535).has_value();
}

// local_dir= is a template: checked as a path with its % sequences left in place.
static Status CheckLocalDirTemplate(const std::string& value) {
  if (!IsCleanAbsolutePath(value))
    return Status::InvalidArgument("local_dir='" + value +
                                   "': must be a clean absolute path template");
  for (size_t i = 0; i < value.size(); i++) {
    if (value[i] != '%') continue;
    const char n = i + 1 < value.size() ? value[i + 1] : '\0';
    if (n != 'n' && n != 'j' && n != 'u' && n != '%')
      return Status::InvalidArgument("local_dir='" + value + "': unknown sequence '%" +
                                     std::string(1, n) + "' (use %n, %j, %u or %%)");
    i++;
  }
  return Status::OK();
}

Result<Config> ParseConfig(const std::vector<std::string>& args) {
  Config c = DefaultConfig();
  std::vector<std::string> seen;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("argument '" + arg +
                                     "' is not key=value (known keys: " + kKnownKeys + ")");
    const std::string key = arg.substr(0, eq);
    const std::string value = arg.substr(eq + 1);
    for (const auto& k : seen)
      if (k == key) return Status::InvalidArgument("key '" + key + "' is given twice");
    seen.push_back(key);
    auto path = [&](std::string* field) -> Status {
      if (!IsCleanAbsolutePath(value))
        return Status::InvalidArgument(key + "='" + value + "': must be a clean absolute path");
      *field = value;
      return Status::OK();
    };
    // A choice of two words: *field is whether it is the first.
    auto choice = [&](const char* on, const char* off, bool* field) -> Status {
      if (value != on && value != off)
        return Status::InvalidArgument(key + "='" + value + "': must be " + on + " or " + off);
      *field = value == on;
      return Status::OK();
    };
    if (key == "agent") {
      FS_RETURN_IF_ERROR(path(&c.agent));
    } else if (key == "preload") {
      FS_RETURN_IF_ERROR(path(&c.preload));
    } else if (key == "srun") {
      FS_RETURN_IF_ERROR(path(&c.srun));
    } else if (key == "run_dir") {
      FS_RETURN_IF_ERROR(path(&c.run_dir));
    } else if (key == "mount_prefix") {
      FS_RETURN_IF_ERROR(path(&c.mount_prefix));
    } else if (key == "local_dir") {
      FS_RETURN_IF_ERROR(CheckLocalDirTemplate(value));
      c.local_dir = value;
    } else if (key == "stagein_timeout") {
      const auto timeout = ParseInt(value, 1, 7 * 24 * 3600);
      if (!timeout)
        return Status::InvalidArgument("stagein_timeout='" + value +
                                       "': must be a number of seconds, 1 to 604800");
      c.stagein_timeout = static_cast<int>(*timeout);
    } else if (key == "replicas") {
      if (!IsValidReplicas(value))
        return Status::InvalidArgument("replicas='" + value +
                                       "': must be 'all' or a number from 1 to 65535");
      c.replicas = value;
    } else if (key == "cache_size") {
      if (!ParseSize(value))
        return Status::InvalidArgument("cache_size='" + value +
                                       "': must be a size such as 20G, 512M or 1T");
      c.cache_size = value;
    } else if (key == "kernel_view") {
      FS_RETURN_IF_ERROR(choice("yes", "no", &c.kernel_view));
    } else if (key == "image") {
      FS_RETURN_IF_ERROR(choice("auto", "no", &c.image));
    } else if (key == "drain_timeout") {
      const auto timeout = ParseInt(value, 0, kMaxDrainTimeout);
      if (!timeout)
        return Status::InvalidArgument("drain_timeout='" + value + "': must be seconds from 0 to " +
                                       std::to_string(kMaxDrainTimeout));
      c.drain_timeout = static_cast<int>(*timeout);
    } else if (key == "local_fs") {
      FS_RETURN_IF_ERROR(choice("auto", "dir", &c.job_fs));
    } else {
      return Status::InvalidArgument("unknown key '" + key + "' (known keys: " + kKnownKeys + ")");
    }
  }
  return c;
}

namespace {

void ResolveFixedPart(std::string* tmpl) {
  const size_t percent = tmpl->find('%');
  const size_t slash = tmpl->rfind('/', percent == std::string::npos ? std::string::npos : percent);
  if (slash == std::string::npos) return;
  const std::string fixed = percent == std::string::npos ? *tmpl : tmpl->substr(0, slash);
  if (fixed.empty()) return;
  char real[PATH_MAX];
  if (::realpath(fixed.c_str(), real) == nullptr) return;
  *tmpl = std::string(real) + tmpl->substr(fixed.size());
}

}  // namespace

void ResolveAdminSymlinks(Config* config) {
  ResolveFixedPart(&config->local_dir);
  ResolveFixedPart(&config->run_dir);
}

}  // namespace fanstore::spank
