// The real files behind the mount on this node. A file's bytes come from one of:
//   - its staged copy under the table's local root (OpenLocalCopy);
//   - this node's shard copy, unpacked into place by the process itself when the agent has
//     not unpacked the file yet (SelfUnpack);
//   - the agent's cache of files fetched from peers (OpenCachedCopy);
// and otherwise from the agent (agent_client.h), or without an agent from the dataset itself
// (orphan.h). OpenFileData (wrap_open.cc) tries them in that order. Directories have real
// stand-ins, so that a directory descriptor and a child's working directory are real
// (OpenDirStandIn, StandInPath).
//
// None throws or allocates; each may be called from any thread.
#pragma once

#include "common/table.h"

namespace fanstore::interceptor {

// ---- A file's bytes ----------------------------------------------------------------------
// Opens the local copy of regular file e read-only (flags: O_CLOEXEC and the like): relative
// to LocalRootFd() when there is one, else by LocalPath. Returns fd or -errno.
int OpenLocalCopy(const table::Entry& e, int flags) noexcept;

// Unpacks a table::kRawCopy file from this node's shard copy itself, about ten times as fast
// as asking the agent: an unnamed file in its directory, linked into place once complete (so
// nobody opens a partial file), then opened as OpenLocalCopy does. A negative errno when the
// copy is gone (the agent finished and removed it) or the name exists (the agent or another
// process is unpacking it): the caller then asks the agent, which knows.
int SelfUnpack(const table::Entry& e, int flags) noexcept;

// Opens the agent's copy of e, kept once fetched from a peer, read-only and not through a
// symlink (flags: O_CLOEXEC and the like). A miss costs one failed open; eviction only
// unlinks, so a descriptor it returns stays valid. Returns fd or -errno (ENOENT also when the
// agent keeps no cache).
int OpenCachedCopy(const table::Entry& e, int flags) noexcept;

// ---- Directory stand-ins -----------------------------------------------------------------
// Where the kernel finds directory `dir` for programs the library does not reach (children's
// working directory, a directory descriptor's raw getdents64): the directory itself in the
// kernel-visible view when there is one, else <local root>/<path>. Writes it into
// out[PATH_MAX]; false when there is neither or it does not fit.
bool StandInPath(const table::Entry& dir, char* out) noexcept;

// Opens a real descriptor standing for directory `dir`: the directory in the kernel-visible
// view, else <local root>/<path>, falling back to the local root itself, then to "/" (O_PATH).
// Attributes and listings of it are never read from the kernel. Returns fd (not yet tracked) or
// -errno.
int OpenDirStandIn(const table::Entry& dir, int flags) noexcept;

}  // namespace fanstore::interceptor
