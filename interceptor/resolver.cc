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

// A walk in progress. `pending` is what is left to walk; symlink expansions alternate between
// two buffers because the new pending text is built from the old one's tail.
struct Cursor {
  const Entry* dir;  // invariant: a directory
  std::string_view pending;
  // The tail of `pending` that is the caller's own text; what precedes it came from symlink
  // targets. A target may never take the walk above the mount (EXDEV, as openat2's
  // RESOLVE_BENEATH): a chain like `x/esc -> up/../..` with `x/up -> .` passes every
  // per-link check of the dataset and would otherwise escape.
  size_t user_len;
  int links = 0;
  int which = 0;
  char bufs[2][PATH_MAX];
};

// One component of the pending text, with what follows it.
struct Component : PathComponent {
  std::string_view rest;  // from the slash after `name`; empty for the last component
  bool last;              // nothing but slashes follows
  bool trailing;          // last, and followed by a slash
  bool from_link;         // the text came from a symlink target
};

// The next component of the pending text; false when only slashes are left.
bool NextComponent(const Cursor& c, Component* out) {
  PathTokenizer tokens(c.pending);
  if (!tokens.Next(out)) return false;
  out->rest = tokens.rest();
  out->from_link = out->name.size() + out->rest.size() > c.user_len;
  out->last = tokens.Done();
  out->trailing = out->last && !out->rest.empty();
  return true;
}

// Replaces the symlink `link`'s component with its target: 0, or an errno for the walk.
int ExpandLink(const table::TableView& t, const Entry& link, std::string_view rest, Cursor* c) {
  if (++c->links > 40) return ELOOP;
  std::string_view target = t.LinkTarget(link);
  if (target.empty()) return ENOENT;
  if (target.front() == '/') return EXDEV;  // an absolute target leaves the namespace
  c->which ^= 1;
  if (!Concat(target, rest, c->bufs[c->which])) return ENAMETOOLONG;
  c->pending = std::string_view(c->bufs[c->which], target.size() + rest.size());
  if (rest.size() < c->user_len) c->user_len = rest.size();
  return 0;  // c->dir stays: the target is relative to the link's directory
}

}  // namespace

Resolver::Resolver(const table::TableView* table, std::string_view mount)
    : mount_(mount), table_(table) {
  size_t slash = mount.rfind('/');
  mount_parent_ = slash == 0 ? mount.substr(0, 1) : mount.substr(0, slash);
}

bool Resolver::LookupCanonical(const Entry& start, std::string_view rel, bool follow_last,
                               Walk* w) const {
  if (!IsCanonicalPath(rel)) return false;
  std::string_view key = rel;
  char join[PATH_MAX];
  if (&start != &root()) {
    long n = Join(table_->Path(start), rel, join);
    if (n < 0) {
      w->err = ENAMETOOLONG;
      return true;
    }
    key = std::string_view(join, n);
  }
  const Entry* e = table_->Lookup(key);
  if (!e || (follow_last && table::IsLink(*e))) return false;
  w->entry = e;
  w->last = LastKind::kName;
  return true;
}

void Resolver::LeaveRoot(std::string_view rest, char* out, Walk* w) const {
  std::string_view head = mount_parent_;
  if (head == "/" && !rest.empty()) head = {};
  if (!Concat(head, rest, out))
    w->err = ENAMETOOLONG;
  else
    w->escaped = true;
}

Walk Resolver::Resolve(const Entry& start, std::string_view rel, bool follow_last,
                       char* out) const {
  Walk w;
  // Fast path: one probe for a canonical path whose components are all real directories.
  if (LookupCanonical(start, rel, follow_last, &w)) return w;

  const table::TableView& t = *table_;
  Cursor c;
  c.dir = &start;
  c.pending = rel;
  c.user_len = rel.size();
  w.trailing_slash = !rel.empty() && rel.back() == '/';
  Component comp;
  while (NextComponent(c, &comp)) {
    w.last = comp.kind;
    if (comp.kind == LastKind::kDot) {
      c.pending = comp.rest;
      continue;
    }
    if (comp.kind == LastKind::kDotDot) {
      if (c.dir == &root()) {
        // Leaves the namespace, which only the caller's own text may do.
        if (comp.from_link)
          w.err = EXDEV;
        else
          LeaveRoot(comp.rest, out, &w);
        return w;
      }
      c.dir = &t.at(c.dir->parent);
      c.pending = comp.rest;
      continue;
    }
    char join[PATH_MAX];
    long n = comp.name.size() > NAME_MAX ? -1 : Join(t.Path(*c.dir), comp.name, join);
    if (n < 0) {
      w.err = ENAMETOOLONG;
      return w;
    }
    const Entry* next = t.Lookup(std::string_view(join, n));
    if (!next) {
      w.err = ENOENT;
      if (comp.last) w.parent = c.dir;
      return w;
    }
    if (table::IsLink(*next) && (!comp.last || follow_last || comp.trailing)) {
      w.err = ExpandLink(t, *next, comp.rest, &c);
      if (w.err) return w;
      continue;
    }
    if ((!comp.last || comp.trailing) && !table::IsDir(*next)) {
      w.err = ENOTDIR;
      return w;
    }
    c.dir = next;
    c.pending = comp.rest;
  }
  w.entry = c.dir;
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

bool NormalizeAbsolute(const char* in, bool drop_dots, char* out) {
  if (!in || in[0] != '/') return false;
  size_t n = 0;
  PathTokenizer tokens(in);
  for (PathComponent c; tokens.Next(&c);) {
    if (c.kind == LastKind::kDot && drop_dots) continue;
    if (c.kind != LastKind::kName || n + 1 + c.name.size() >= PATH_MAX) return false;
    out[n++] = '/';
    memcpy(out + n, c.name.data(), c.name.size());
    n += c.name.size();
  }
  if (n == 0) out[n++] = '/';
  out[n] = '\0';
  return true;
}

bool NormalizeMount(const char* in, char* out) {
  // "/" is not a usable mount.
  return NormalizeAbsolute(in, /*drop_dots=*/true, out) && out[1] != '\0';
}

const char* UnderMountSpelled(std::string_view mount, const char* path) {
  if (path[0] != '/') return nullptr;
  size_t m = 0;  // mount[0, m) is matched
  PathTokenizer tokens(path);
  for (PathComponent c; tokens.Next(&c);) {
    if (c.kind == LastKind::kDot) continue;
    const size_t len = c.name.size();
    if (c.kind == LastKind::kDotDot || m >= mount.size() || mount[m] != '/' ||
        mount.size() < m + 1 + len || memcmp(mount.data() + m + 1, c.name.data(), len) != 0)
      return nullptr;
    m += 1 + len;
    if (m == mount.size()) return tokens.pos();
    if (mount[m] != '/') return nullptr;
  }
  return nullptr;  // the path ends above the mount
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
