// VDir: allocation and iteration.
#include "interceptor/vdir.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

namespace fanstore::interceptor {

VDir* NewVDir(uint32_t dir, int fd) noexcept {
  auto* v = static_cast<VDir*>(calloc(1, sizeof(VDir)));
  if (!v) return nullptr;
  v->sentinel = kVDirSentinel;
  v->dir = dir;
  v->fd = fd;
  return v;
}

unsigned char DirentType(uint32_t mode) noexcept {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return DT_REG;
    case S_IFDIR:
      return DT_DIR;
    case S_IFLNK:
      return DT_LNK;
    case S_IFIFO:
      return DT_FIFO;
    case S_IFSOCK:
      return DT_SOCK;
    case S_IFCHR:
      return DT_CHR;
    case S_IFBLK:
      return DT_BLK;
    default:
      return DT_UNKNOWN;
  }
}

struct dirent64* NextEntry(const table::TableView& t, VDir* v) noexcept {
  const table::Entry& dir = t.at(v->dir);
  auto kids = t.Children(dir);
  while (true) {
    const uint64_t pos = v->pos;
    std::string_view name;
    const table::Entry* e;
    if (pos == 0) {
      name = ".";
      e = &dir;
    } else if (pos == 1) {
      name = "..";
      e = &t.at(dir.parent);
    } else if (pos - 2 < kids.size()) {
      e = &t.at(kids[pos - 2]);
      name = t.Name(*e);
    } else {
      return nullptr;
    }
    v->pos = pos + 1;
    if (name.size() >= sizeof v->ent.d_name) continue;  // cannot be represented; never packed
    v->ent.d_ino = t.Ino(*e);
    v->ent.d_off = static_cast<off64_t>(pos + 1);
    v->ent.d_reclen = sizeof v->ent;
    v->ent.d_type = DirentType(e->mode);
    memcpy(v->ent.d_name, name.data(), name.size());
    v->ent.d_name[name.size()] = '\0';
    return &v->ent;
  }
}

}  // namespace fanstore::interceptor
