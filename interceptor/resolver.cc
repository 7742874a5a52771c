// Resolver: component-by-component walk with symlink expansion and escapes.
#include "interceptor/resolver.h"

#include <errno.h>
#include <string.h>

#include "common/path.h"

namespace fanstore::interceptor {
namespace {

using table::Entry;

// Joins a directory's table path and a name into buf; returns the length or -1.
long Join(std::string_view dir, std::string_view name, char* buf) {
  size_t n = dir.size() + (dir.empty() ? 0 : 1) + name.size();
  if (n >= PATH_MAX) return -1;
  size_t at = 0;
  if (!dir.empty()) {
    memcpy(buf, dir.data(), dir.size());
    at = dir.size();
    buf[at++] = '/';
  }
  memcpy(buf + at, name.data(), name.size());
  return static_cast<long>(n);
}

// Writes head + tail into out[PATH_MAX]; false when it does not fit.
bool Concat(std::string_view head, std::string_view tail, char* out) {
  if (head.size() + tail.size() >= PATH_MAX) return false;
  // tail may live in out's sibling buffer but never overlaps out itself.
  // An empty view may have a null data(): memmove must not see it, even for 0 bytes.
  if (!head.empty()) memmove(out, head.data(), head.size());
  if (!tail.empty()) memmove(out + head.size(), tail.data(), tail.size());
  out[head.size() + tail.size()] = '\0';
  return true;
}

}  // namespace

Resolver::Resolver(const table::TableView* table, std::string_view mount)
    : mount_(mount), table_(table) {
  size_t slash = mount.rfind('/');
  mount_parent_ = slash == 0 ? mount.substr(0, 1) : mount.substr(0, slash);
}

Walk Resolver::Resolve(const Entry& start, std::string_view rel, bool follow_last,
                       char* out) const {
  Walk w;
  const table::TableView& t = *table_;
  char join[PATH_MAX];

  // Fast path: one probe for a canonical path whose components are all real directories.
  if (IsCanonicalPath(rel)) {
    std::string_view key = rel;
    if (&start != &root()) {
      long n = Join(t.Path(start), rel, join);
      if (n < 0) {
        w.err = ENAMETOOLONG;
        return w;
      }
      key = std::string_view(join, n);
    }
    if (const Entry* e = t.Lookup(key); e && !(follow_last && table::IsLink(*e))) {
      w.entry = e;
      w.last = LastKind::kName;
      return w;
    }
  }

  // Slow path. `pending` is what is left to walk; symlink expansions alternate between two
  // buffers because the new pending text is built from the old one's tail.
  char bufs[2][PATH_MAX];
  int which = 0;
  std::string_view pending = rel;
  // The tail of `pending` that is the caller's own text; what precedes it came from symlink
  // targets. A target may never take the walk above the mount (EXDEV, as openat2's
  // RESOLVE_BENEATH): a chain like `x/esc -> up/../..` with `x/up -> .` passes every
  // per-link check of the dataset and would otherwise escape.
  size_t user_len = rel.size();
  const Entry* cur = &start;
  int links = 0;
  w.trailing_slash = !rel.empty() && rel.back() == '/';
  while (true) {
    size_t skip = pending.find_first_not_of('/');
    if (skip == std::string_view::npos) break;
    pending.remove_prefix(skip);
    const bool from_link = pending.size() > user_len;
    size_t slash = pending.find('/');
    std::string_view comp = pending.substr(0, slash);
    std::string_view rest =
        slash == std::string_view::npos ? std::string_view() : pending.substr(slash);
    const bool last = rest.find_first_not_of('/') == std::string_view::npos;
    const bool trailing = last && !rest.empty();
    // Invariant: cur is a directory.
    if (comp == ".") {
      w.last = LastKind::kDot;
      pending = rest;
      continue;
    }
    if (comp == "..") {
      w.last = LastKind::kDotDot;
      if (cur == &root()) {
        if (from_link) {
          w.err = EXDEV;
          return w;
        }
        // Leaves the namespace: continue in the real directory above the mount.
        std::string_view head = mount_parent_;
        if (head == "/" && !rest.empty()) head = {};
        if (!Concat(head, rest, out))
          w.err = ENAMETOOLONG;
        else
          w.escaped = true;
        return w;
      }
      cur = &t.at(cur->parent);
      pending = rest;
      continue;
    }
    w.last = LastKind::kName;
    if (comp.size() > NAME_MAX) {
      w.err = ENAMETOOLONG;
      return w;
    }
    long n = Join(t.Path(*cur), comp, join);
    if (n < 0) {
      w.err = ENAMETOOLONG;
      return w;
    }
    const Entry* next = t.Lookup(std::string_view(join, n));
    if (!next) {
      w.err = ENOENT;
      if (last) w.parent = cur;
      return w;
    }
    if (table::IsLink(*next) && (!last || follow_last || trailing)) {
      if (++links > 40) {
        w.err = ELOOP;
        return w;
      }
      std::string_view target = t.LinkTarget(*next);
      if (target.empty()) {
        w.err = ENOENT;
        return w;
      }
      if (target.front() == '/') {
        // An absolute target leaves the namespace: no dataset may hold one.
        w.err = EXDEV;
        return w;
      }
      which ^= 1;
      if (!Concat(target, rest, bufs[which])) {
        w.err = ENAMETOOLONG;
        return w;
      }
      pending = std::string_view(bufs[which], target.size() + rest.size());
      if (rest.size() < user_len) user_len = rest.size();
      continue;  // cur stays: the target is relative to the link's directory
    }
    if ((!last || trailing) && !table::IsDir(*next)) {
      w.err = ENOTDIR;
      return w;
    }
    cur = next;
    pending = rest;
  }
  w.entry = cur;
  return w;
}

long Resolver::AbsolutePath(const Entry& e, char* out, size_t cap) const {
  std::string_view rel = table_->Path(e);
  size_t n = mount_.size() + (rel.empty() ? 0 : 1 + rel.size());
  if (n + 1 > cap) return -ERANGE;
  memcpy(out, mount_.data(), mount_.size());
  if (!rel.empty()) {
    out[mount_.size()] = '/';
    memcpy(out + mount_.size() + 1, rel.data(), rel.size());
  }
  out[n] = '\0';
  return static_cast<long>(n);
}

bool NormalizeMount(const char* in, char* out) {
  if (!in || in[0] != '/') return false;
  size_t n = 0;
  const char* p = in;
  while (*p) {
    while (*p == '/') p++;
    if (!*p) break;
    const char* end = p;
    while (*end && *end != '/') end++;
    size_t len = static_cast<size_t>(end - p);
    if (len == 1 && p[0] == '.') {
      p = end;
      continue;
    }
    if (len == 2 && p[0] == '.' && p[1] == '.') return false;
    if (n + 1 + len >= PATH_MAX) return false;
    out[n++] = '/';
    memcpy(out + n, p, len);
    n += len;
    p = end;
  }
  out[n] = '\0';
  return n > 0;  // "/" is not a usable mount
}

int AncestorLength(std::string_view mount, std::string_view dir) {
  if (dir == "/") return 1;
  if (dir.size() < mount.size() && mount.substr(0, dir.size()) == dir && mount[dir.size()] == '/')
    return static_cast<int>(dir.size());
  return -1;
}

const char* EntersFromAncestor(std::string_view mount, int anc_len, const char* path) {
  if (anc_len <= 0 || path[0] == '/') return nullptr;
  while (path[0] == '.' && path[1] == '/') {
    path += 2;
    while (*path == '/') path++;
  }
  std::string_view tail = mount.substr(anc_len == 1 ? 1 : static_cast<size_t>(anc_len) + 1);
  if (strncmp(path, tail.data(), tail.size()) != 0) return nullptr;
  char c = path[tail.size()];
  return c == '/' || c == '\0' ? path + tail.size() : nullptr;
}

}  // namespace fanstore::interceptor
