// A directory of the calling user's own, in a place others may have planted things first.
#pragma once

#include <string>

#include "common/status.h"

namespace fanstore {

// `path` as a private directory of this user's: created 0700 when missing (*created then
// true), else taken only when it is a directory (not a symlink) owned by this user, checked
// through a descriptor, and made 0700. Fails, naming the owner, when something else is there.
Status EnsureOwnDir(const std::string& path, bool* created = nullptr);

// Whether `path` is a directory (not a symlink) that is the root of a file system of its own:
// the SPANK plugin's per-job tmpfs at a job's local directory.
bool IsMountPoint(const std::string& path);

}  // namespace fanstore
