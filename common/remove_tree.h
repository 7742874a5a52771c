// Removing a directory tree that someone else may have planted things in.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace fanstore {

// Removes `path` and everything below it. Works through directory descriptors only: never
// follows a symlink (a symlink is removed, not its target), never leaves the file system
// `path` is on, and builds no path strings, so a tree thousands of levels deep costs neither
// memory nor descriptors (directories deeper than a bound are moved up and removed from
// there). A missing path is success. Errors name `path` and one entry name at most. With
// `threads` above 1, the directories of the first level (one to four down) that has several
// for each thread are removed in parallel first.
Status RemoveTree(const std::string& path, size_t threads = 1);

// Empties the directory open (O_RDONLY) as `dir`, by the same rules, and keeps it; `name` is for
// errors. With `seize` (root only), every directory becomes root's before it is listed (or moved
// up), so that a user who holds a descriptor of one can add nothing to it meanwhile, and every
// file is truncated before it is unlinked, so that its pages go even while someone holds it
// open. Fails when `deadline` passes first, or when the directory is not empty at the end.
Status EmptyTree(
    int dir, const std::string& name, bool seize = false,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

}  // namespace fanstore
