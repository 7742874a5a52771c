// Submission-time dataset check (see dataset_check.h).
#include "spank-plugin/dataset_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format/manifest.h"

namespace fanstore::spank {
namespace {

Status Unreadable(const std::string& what, int err) {
  return Status::Permission(what + " is not readable by you (" + std::strerror(err) + ")");
}

}  // namespace

Status CheckDataset(const std::string& dataset) {
  if (dataset.empty() || dataset[0] != '/')
    return Status::InvalidArgument("dataset " + dataset + ": must be an absolute path");
  struct stat st;
  if (::stat(dataset.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return Status::NotFound("dataset " + dataset + " does not exist");
    if (err == EACCES) return Unreadable("dataset " + dataset, err);
    return Status::FromErrno("dataset " + dataset, err);
  }
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(
        dataset + " is not a FanStore dataset (not a directory; make one with `fanstore pack SRC " +
        dataset + "`)");
  if (::access(dataset.c_str(), R_OK | X_OK) != 0) return Unreadable("dataset " + dataset, errno);
  const std::string manifest = dataset + "/manifest.json";
  if (::access(manifest.c_str(), F_OK) == 0 && ::access(manifest.c_str(), R_OK) != 0)
    return Unreadable(manifest, errno);

  auto m = format::LoadManifest(dataset);
  if (!m.ok()) return m.status();
  for (const auto& shard : m.value().shards) {
    const std::string path = dataset + "/" + shard.file;
    if (::access(path.c_str(), R_OK) == 0) continue;
    const int err = errno;
    if (err == ENOENT)
      return Status::NotFound("dataset " + dataset + " is incomplete: shard " + shard.file +
                              " is missing");
    return Unreadable(path, err);
  }
  if (!m.value().dict.file.empty()) {
    const std::string path = dataset + "/" + m.value().dict.file;
    if (::access(path.c_str(), R_OK) != 0) return Unreadable(path, errno);
  }
  return Status::OK();
}

Status CheckOutputTarget(const std::string& output) {
  std::string dir = output;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return Status::FromErrno("--fanstore-output=" + output, errno);
    dir = dir.substr(0, std::max<size_t>(dir.rfind('/'), 1));
    if (::stat(dir.c_str(), &st) != 0)
      return Status::NotFound("--fanstore-output=" + output + ": its parent " + dir +
                              " does not exist");
  }
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument("--fanstore-output=" + output + ": " + dir +
                                   " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return Status::Permission("--fanstore-output=" + output + ": " + dir +
                              " is not writable by you (" + std::strerror(errno) + ")");
  return Status::OK();
}

Status CheckUserPaths(const UserOptions& opts) {
  if (!opts.dataset.empty()) FS_RETURN_IF_ERROR(CheckDataset(opts.dataset));
  if (!opts.output.empty()) FS_RETURN_IF_ERROR(CheckOutputTarget(opts.output));
  return Status::OK();
}

}  // namespace fanstore::spank
