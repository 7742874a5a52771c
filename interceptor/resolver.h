// Resolver: path walking inside the mounted namespace, with the kernel's semantics.
//
// Pure logic over a TableView: no syscalls, no allocation (fixed PATH_MAX buffers). The
// wrappers locate a path (absolute under the mount, relative to the virtual working directory
// or to a tracked directory descriptor) and hand the part below the anchor to Resolve().
//
// Semantics follow path_resolution(7): "." and ".." are physical (".." of a symlinked
// directory is the target's parent); symlinks are expanded relative to their directory, at
// most 40 of them; a trailing slash requires a directory and follows a final symlink; ".."
// from the mount root in the caller's path leaves the namespace: Resolve() then reports the
// real path to continue with, which the caller locates again (it may re-enter). A symlink's
// target never leaves it: an absolute target, or one whose ".." climbs above the root, even
// through other symlinks, fails with EXDEV.
//
// Thread safety: a Resolver is immutable after construction.
#pragma once

#include <limits.h>

#include <cstdint>
#include <string_view>

#include "common/table.h"

namespace fanstore::interceptor {

// What the last component of a path was, for the operations that care (rmdir ".").
enum class LastKind : uint8_t { kNone, kName, kDot, kDotDot };

// One component of a path, as PathTokenizer splits it.
struct PathComponent {
  std::string_view name;
  LastKind kind = LastKind::kNone;  // kName, kDot or kDotDot
};

// The interceptor's one path tokenizer: splits a path into components as the kernel does (a
// run of slashes separates two; leading and trailing slashes add none) and marks "." and "..".
// A NUL-terminated path is read only as far as its caller asks, never measured first, so that
// a path elsewhere costs UnderMountSpelled and RealAncestorLength a look at its first component.
class PathTokenizer {
 public:
  explicit PathTokenizer(const char* path) : pos_(path), end_(nullptr), sized_(false) {}
  explicit PathTokenizer(std::string_view path)
      : pos_(path.data()), end_(path.data() + path.size()), sized_(true) {}

  // Skips slashes and takes the next component; false when only slashes were left.
  bool Next(PathComponent* c) {
    while (!AtEnd(pos_) && *pos_ == '/') pos_++;
    if (AtEnd(pos_)) return false;
    const char* end = pos_;
    while (!AtEnd(end) && *end != '/') end++;
    c->name = std::string_view(pos_, static_cast<size_t>(end - pos_));
    c->kind = c->name == "."    ? LastKind::kDot
              : c->name == ".." ? LastKind::kDotDot
                                : LastKind::kName;
    pos_ = end;
    return true;
  }

  // True when only slashes are left, so that Next() would return false.
  bool Done() const {
    const char* p = pos_;
    while (!AtEnd(p) && *p == '/') p++;
    return AtEnd(p);
  }

  // The text not yet taken: from the slash after the last component taken, or the end.
  const char* pos() const { return pos_; }
  std::string_view rest() const {
    return sized_ ? std::string_view(pos_, static_cast<size_t>(end_ - pos_)) : pos_;
  }

 private:
  bool AtEnd(const char* p) const { return sized_ ? p == end_ : *p == '\0'; }

  const char* pos_;
  const char* end_;  // sized_: one past the last character
  bool sized_;       // else the text ends at its NUL
};

struct Walk {
  int err = 0;                           // 0, ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, or EXDEV
                                         // when a symlink's target leaves the mount
  const table::Entry* entry = nullptr;   // err == 0: what the path names
  const table::Entry* parent = nullptr;  // err == ENOENT and only the last component is
                                         // missing: the directory that would hold it
  bool escaped = false;                  // left the namespace: see Resolve()
  bool trailing_slash = false;           // the path ended in '/'
  LastKind last = LastKind::kNone;       // kNone: the path had no component
};

class Resolver {
 public:
  // `mount` is the normalised absolute mount path (no trailing slash, not "/").
  Resolver(const table::TableView* table, std::string_view mount);

  // Resolves `rel` (relative; leading slashes are ignored) starting at directory `start`.
  // follow_last: expand a final symlink. On escape, sets w.escaped and writes the absolute
  // real path to continue with into out[PATH_MAX] (ENAMETOOLONG if it does not fit).
  Walk Resolve(const table::Entry& start, std::string_view rel, bool follow_last, char* out) const;

  const table::TableView& table() const { return *table_; }
  const table::Entry& root() const { return table_->at(0); }
  std::string_view mount() const { return mount_; }

  // Writes the absolute virtual path of `e` (mount + "/" + path) into out[cap]; returns its
  // length, or -ERANGE when it does not fit with its terminating NUL.
  long AbsolutePath(const table::Entry& e, char* out, size_t cap) const;

 private:
  // The fast path: a canonical `rel` found by one probe. False when the slow walk must decide.
  bool LookupCanonical(const table::Entry& start, std::string_view rel, bool follow_last,
                       Walk* w) const;
  // ".." from the mount root in the caller's path: continue at mount_parent_ + rest, in out.
  void LeaveRoot(std::string_view rest, char* out, Walk* w) const;

  std::string_view mount_;
  std::string_view mount_parent_;  // "/" for a mount like "/ds"
  const table::TableView* table_;
};

// Normalises an absolute path lexically into out[PATH_MAX]: collapses "//", strips trailing
// slashes ("/" stays "/"), and drops "." components when drop_dots is set. Returns false for
// relative paths, paths with a ".." component (which only the file system can resolve), a "."
// component when drop_dots is not set, or paths that do not fit.
bool NormalizeAbsolute(const char* in, bool drop_dots, char* out);

// NormalizeAbsolute for the mount path, which may not be "/" itself.
bool NormalizeMount(const char* in, char* out);

// When `path` is absolute and lies under `mount` (a component-wise prefix), returns the rest
// (possibly empty, possibly starting with '/'); otherwise nullptr. One prefix compare.
inline const char* UnderMount(std::string_view mount, const char* path) {
  // strncmp, not memcmp: `path` may be shorter than the mount and end right before a page.
  if (path[0] != '/' || __builtin_strncmp(path, mount.data(), mount.size()) != 0) return nullptr;
  char c = path[mount.size()];
  return c == '/' || c == '\0' ? path + mount.size() : nullptr;
}

// UnderMount for the other spellings the kernel accepts of the mount's own components
// ("//fanstore//ds/./x" is "/fanstore/ds/x"): called when UnderMount said no. Compares
// component by component and stops at the first that differs (so a path elsewhere, "/usr/...",
// costs one short compare); ".." before the mount's end is left to the kernel (nullptr).
// Returns the rest after the mount's last component, as UnderMount does.
const char* UnderMountSpelled(std::string_view mount, const char* path);

// Length of `dir` when it is a strict ancestor of `mount` ("/" or a component-wise prefix),
// else -1. `dir` is an absolute, normalised directory path (a getcwd result).
int AncestorLength(std::string_view mount, std::string_view dir);

// For a relative path seen from the ancestor mount[0, anc_len): the rest of `path` below the
// mount when it enters the mount ("ds/x" from "/fanstore" for mount "/fanstore/ds"), else
// nullptr. Leading "./" are skipped.
const char* EntersFromAncestor(std::string_view mount, int anc_len, const char* path);

}  // namespace fanstore::interceptor
