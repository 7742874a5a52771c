// Wrappers that read attributes: the stat family (the glibc 2.33+ symbols and the older
// __xstat ones), statx, access, statfs/statvfs and reading xattrs. Paths and tracked
// descriptors under the mount get the same table-derived answer, so fstat(open(p)) equals
// stat(p) field for field.
#include <string.h>
#include <sys/sysmacros.h>

#include <atomic>

#include "common/xattrs.h"
#include "interceptor/wrappers.h"

namespace fanstore::interceptor {
namespace {

using table::Entry;

constexpr long kFsMagic = 0x46414e53;  // "FANS": unknown to gnulib fts, so no special casing
constexpr int kBlock = 4096;

// The only glibc __xstat version on LP64 targets (_STAT_VER_KERNEL 0 is the same layout).
bool KnownStatVer(int ver) { return ver == 0 || ver == 1; }

long FillStat(const Walk& w, void* st) {
  if (w.err) return -w.err;
  Table().FillStat(*w.entry, static_cast<struct stat*>(st));
  return 0;
}

void StatxFromStat(const struct stat& st, struct statx* stx) {
  memset(stx, 0, sizeof *stx);
  stx->stx_mask = STATX_BASIC_STATS;
  stx->stx_blksize = static_cast<uint32_t>(st.st_blksize);
  stx->stx_nlink = static_cast<uint32_t>(st.st_nlink);
  stx->stx_uid = st.st_uid;
  stx->stx_gid = st.st_gid;
  stx->stx_mode = static_cast<uint16_t>(st.st_mode);
  stx->stx_ino = st.st_ino;
  stx->stx_size = static_cast<uint64_t>(st.st_size);
  stx->stx_blocks = static_cast<uint64_t>(st.st_blocks);
  auto ts = [](const struct timespec& t) {
    struct statx_timestamp s = {};
    s.tv_sec = t.tv_sec;
    s.tv_nsec = static_cast<uint32_t>(t.tv_nsec);
    return s;
  };
  stx->stx_atime = ts(st.st_atim);
  stx->stx_mtime = ts(st.st_mtim);
  stx->stx_ctime = ts(st.st_ctim);
  stx->stx_dev_major = major(st.st_dev);
  stx->stx_dev_minor = minor(st.st_dev);
}

void FillStatx(const Entry& e, struct statx* stx) {
  struct stat st;
  Table().FillStat(e, &st);
  StatxFromStat(st, stx);
}

long Access(const Walk& w, int mode, bool effective) {
  if (w.err) return -w.err;
  if (mode & ~(R_OK | W_OK | X_OK)) return -EINVAL;
  if (mode == F_OK) return 0;
  if (mode & W_OK) return -EROFS;
  return Permitted(*w.entry, mode, effective) ? 0 : -EACCES;
}

uint64_t TotalBytes() {
  static std::atomic<uint64_t> cached{~uint64_t{0}};
  uint64_t v = cached.load(std::memory_order_relaxed);
  if (v != ~uint64_t{0}) return v;
  const table::TableView& t = Table();
  uint64_t sum = 0;
  for (uint32_t i = 0; i < t.size(); i++)
    if (table::IsReg(t.at(i))) sum += t.at(i).size;
  cached.store(sum, std::memory_order_relaxed);
  return sum;
}

void FillStatfs(struct statfs* s) {
  const table::Header& h = Table().header();
  memset(s, 0, sizeof *s);
  s->f_type = kFsMagic;
  s->f_bsize = kBlock;
  s->f_frsize = kBlock;
  s->f_blocks = (TotalBytes() + kBlock - 1) / kBlock;
  s->f_files = Table().size();
  s->f_namelen = NAME_MAX;
  s->f_flags = ST_RDONLY | ST_NOSUID | ST_NODEV | 0x0020 /* ST_VALID */;
  memcpy(&s->f_fsid, &h.dataset_id, sizeof s->f_fsid);
}

void FillStatvfs(struct statvfs* s) {
  const table::Header& h = Table().header();
  memset(s, 0, sizeof *s);
  s->f_bsize = kBlock;
  s->f_frsize = kBlock;
  s->f_blocks = (TotalBytes() + kBlock - 1) / kBlock;
  s->f_files = Table().size();
  s->f_fsid = static_cast<unsigned long>(h.dataset_id);
  s->f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
  s->f_namemax = NAME_MAX;
}

// ---- Directories above the mount that do not exist ------------------------------------------

long AncestorStat(int length, void* st) {
  FillAncestorStat(length, static_cast<struct stat*>(st));
  return 0;
}

long AncestorAccess(int mode) {
  if (mode & ~(R_OK | W_OK | X_OK)) return -EINVAL;
  return (mode & W_OK) ? -EROFS : 0;  // mode 0555: readable and searchable by everyone
}

// ---- Shared bodies -----------------------------------------------------------------------

int StatAt(int dirfd, const char* path, void* st, int flags,
           int (*real)(int, const char*, struct stat*, int)) {
  return AsInt(OnPath(
      dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), flags & AT_EMPTY_PATH,
      [&](int d, const char* p) { return real(d, p, static_cast<struct stat*>(st), flags); },
      [&](const Walk& w) { return FillStat(w, st); },
      [&](int length) { return AncestorStat(length, st); }));
}

int StatPath(const char* path, void* st, bool follow, int (*real)(const char*, struct stat*)) {
  return AsInt(OnPath(
      AT_FDCWD, path, follow, false,
      [&](int d, const char* p) {
        // d is AT_FDCWD for a path-only call; p may be a rewritten absolute path.
        (void)d;
        return real(p, static_cast<struct stat*>(st));
      },
      [&](const Walk& w) { return FillStat(w, st); },
      [&](int length) { return AncestorStat(length, st); }));
}

int StatFd(int fd, void* st, int (*real)(int, struct stat*)) {
  return AsInt(OnFd(
      fd, [&] { return real(fd, static_cast<struct stat*>(st)); },
      [&](const Entry& e) {
        Table().FillStat(e, static_cast<struct stat*>(st));
        return 0L;
      }));
}

// Extended attributes, from the table: getxattr(2) and listxattr(2) of an entry.
long GetXattr(const fanstore::table::Entry& e, const char* name, void* value, size_t size) {
  return fanstore::xattrs::Get(Table().Xattrs(e), name, value, size);
}
long ListXattr(const fanstore::table::Entry& e, char* list, size_t size) {
  return fanstore::xattrs::List(Table().Xattrs(e), list, size);
}

// A path's attribute call: `answer` for an entry of the dataset, `none` for the directories
// above the mount (which have none).
template <typename Real, typename Answer>
ssize_t XattrPath(const char* path, bool follow, long none, Real&& real, Answer&& answer) {
  return OnPath(
      AT_FDCWD, path, follow, false, [&](int, const char* p) { return real(p); },
      [&](const Walk& w) { return w.err ? -static_cast<long>(w.err) : answer(*w.entry); },
      [&](int) { return none; });
}

template <typename Buf, typename Real, typename Fill>
int StatfsPath(const char* path, Buf* buf, Real&& real, Fill&& fill) {
  return AsInt(OnPath(
      AT_FDCWD, path, true, false, [&](int, const char* p) { return real(p, buf); },
      [&](const Walk& w) {
        if (w.err) return -static_cast<long>(w.err);
        fill(buf);
        return 0L;
      },
      [&](int) {
        fill(buf);
        return 0L;
      }));
}

template <typename Buf, typename Real, typename Fill>
int StatfsFd(int fd, Buf* buf, Real&& real, Fill&& fill) {
  return AsInt(OnFd(
      fd, [&] { return real(fd, buf); },
      [&](const Entry&) {
        fill(buf);
        return 0L;
      }));
}

void FillStatfs64(struct statfs64* s) { FillStatfs(reinterpret_cast<struct statfs*>(s)); }
void FillStatvfs64(struct statvfs64* s) { FillStatvfs(reinterpret_cast<struct statvfs*>(s)); }

template <typename Real>
int AccessAt(int dirfd, const char* path, int mode, int flags, Real&& real) {
  return AsInt(OnPath(
      dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), flags & AT_EMPTY_PATH, real,
      [&](const Walk& w) { return Access(w, mode, flags & AT_EACCESS); },
      [&](int) { return AncestorAccess(mode); }));
}

}  // namespace
}  // namespace fanstore::interceptor

using namespace fanstore::interceptor;  // NOLINT: the wrappers below are the C entry points
namespace table = fanstore::table;

// ---- stat family ---------------------------------------------------------------------------

extern "C" int fanstore_stat(const char* path, struct stat* st) noexcept {
  return StatPath(path, st, true, Real().stat);
}
extern "C" int fanstore_stat64(const char* path, struct stat64* st) noexcept {
  return StatPath(path, st, true,
                  reinterpret_cast<int (*)(const char*, struct stat*)>(Real().stat64));
}
extern "C" int fanstore_lstat(const char* path, struct stat* st) noexcept {
  return StatPath(path, st, false, Real().lstat);
}
extern "C" int fanstore_lstat64(const char* path, struct stat64* st) noexcept {
  return StatPath(path, st, false,
                  reinterpret_cast<int (*)(const char*, struct stat*)>(Real().lstat64));
}
extern "C" int fanstore_fstat(int fd, struct stat* st) noexcept {
  return StatFd(fd, st, Real().fstat);
}
extern "C" int fanstore_fstat64(int fd, struct stat64* st) noexcept {
  return StatFd(fd, st, reinterpret_cast<int (*)(int, struct stat*)>(Real().fstat64));
}
extern "C" int fanstore_fstatat(int dirfd, const char* path, struct stat* st, int flags) noexcept {
  return StatAt(dirfd, path, st, flags, Real().fstatat);
}
extern "C" int fanstore_fstatat64(int dirfd, const char* path, struct stat64* st,
                                  int flags) noexcept {
  return StatAt(dirfd, path, st, flags,
                reinterpret_cast<int (*)(int, const char*, struct stat*, int)>(Real().fstatat64));
}

// Binaries linked against glibc < 2.33 call these. Unknown versions go to libc (EINVAL).
extern "C" int fanstore___xstat(int ver, const char* path, struct stat* st) noexcept {
  if (!KnownStatVer(ver)) return Real().__xstat(ver, path, st);
  return StatPath(path, st, true, Real().stat);
}
extern "C" int fanstore___xstat64(int ver, const char* path, struct stat64* st) noexcept {
  if (!KnownStatVer(ver)) return Real().__xstat64(ver, path, st);
  return StatPath(path, st, true, Real().stat);
}
extern "C" int fanstore___lxstat(int ver, const char* path, struct stat* st) noexcept {
  if (!KnownStatVer(ver)) return Real().__lxstat(ver, path, st);
  return StatPath(path, st, false, Real().lstat);
}
extern "C" int fanstore___lxstat64(int ver, const char* path, struct stat64* st) noexcept {
  if (!KnownStatVer(ver)) return Real().__lxstat64(ver, path, st);
  return StatPath(path, st, false, Real().lstat);
}
extern "C" int fanstore___fxstat(int ver, int fd, struct stat* st) noexcept {
  if (!KnownStatVer(ver)) return Real().__fxstat(ver, fd, st);
  return StatFd(fd, st, Real().fstat);
}
extern "C" int fanstore___fxstat64(int ver, int fd, struct stat64* st) noexcept {
  if (!KnownStatVer(ver)) return Real().__fxstat64(ver, fd, st);
  return StatFd(fd, st, Real().fstat);
}
extern "C" int fanstore___fxstatat(int ver, int dirfd, const char* path, struct stat* st,
                                   int flags) noexcept {
  if (!KnownStatVer(ver)) return Real().__fxstatat(ver, dirfd, path, st, flags);
  return StatAt(dirfd, path, st, flags, Real().fstatat);
}
extern "C" int fanstore___fxstatat64(int ver, int dirfd, const char* path, struct stat64* st,
                                     int flags) noexcept {
  if (!KnownStatVer(ver)) return Real().__fxstatat64(ver, dirfd, path, st, flags);
  return StatAt(dirfd, path, st, flags, Real().fstatat);
}

extern "C" int fanstore_statx(int dirfd, const char* path, int flags, unsigned int mask,
                              struct statx* stx) noexcept {
  auto real = [&](int d, const char* p) { return Real().statx(d, p, flags, mask, stx); };
  // statx(fd, "", AT_EMPTY_PATH) of a tracked descriptor comes here through Locate too.
  return AsInt(OnPath(
      dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), flags & AT_EMPTY_PATH, real,
      [&](const Walk& w) {
        if (w.err) return -static_cast<long>(w.err);
        FillStatx(*w.entry, stx);
        return 0L;
      },
      [&](int length) {
        struct stat st;
        FillAncestorStat(length, &st);
        StatxFromStat(st, stx);
        return 0L;
      }));
}

// ---- access ----------------------------------------------------------------------------------

extern "C" int fanstore_access(const char* path, int mode) noexcept {
  return AccessAt(AT_FDCWD, path, mode, 0,
                  [&](int, const char* p) { return Real().access(p, mode); });
}
extern "C" int fanstore_faccessat(int dirfd, const char* path, int mode, int flags) noexcept {
  return AccessAt(dirfd, path, mode, flags,
                  [&](int d, const char* p) { return Real().faccessat(d, p, mode, flags); });
}
extern "C" int fanstore_euidaccess(const char* path, int mode) noexcept {
  return AccessAt(AT_FDCWD, path, mode, AT_EACCESS,
                  [&](int, const char* p) { return Real().euidaccess(p, mode); });
}
extern "C" int fanstore_eaccess(const char* path, int mode) noexcept {
  return AccessAt(AT_FDCWD, path, mode, AT_EACCESS,
                  [&](int, const char* p) { return Real().eaccess(p, mode); });
}

// ---- statfs / statvfs ----------------------------------------------------------------------

extern "C" int fanstore_statfs(const char* path, struct statfs* buf) noexcept {
  return StatfsPath(path, buf, Real().statfs, FillStatfs);
}
extern "C" int fanstore_statfs64(const char* path, struct statfs64* buf) noexcept {
  return StatfsPath(path, buf, Real().statfs64, FillStatfs64);
}
extern "C" int fanstore_fstatfs(int fd, struct statfs* buf) noexcept {
  return StatfsFd(fd, buf, Real().fstatfs, FillStatfs);
}
extern "C" int fanstore_fstatfs64(int fd, struct statfs64* buf) noexcept {
  return StatfsFd(fd, buf, Real().fstatfs64, FillStatfs64);
}
extern "C" int fanstore_statvfs(const char* path, struct statvfs* buf) noexcept {
  return StatfsPath(path, buf, Real().statvfs, FillStatvfs);
}
extern "C" int fanstore_statvfs64(const char* path, struct statvfs64* buf) noexcept {
  return StatfsPath(path, buf, Real().statvfs64, FillStatvfs64);
}
extern "C" int fanstore_fstatvfs(int fd, struct statvfs* buf) noexcept {
  return StatfsFd(fd, buf, Real().fstatvfs, FillStatvfs);
}
extern "C" int fanstore_fstatvfs64(int fd, struct statvfs64* buf) noexcept {
  return StatfsFd(fd, buf, Real().fstatvfs64, FillStatvfs64);
}

// ---- reading extended attributes: the dataset's, from the table -------------------------

extern "C" ssize_t fanstore_getxattr(const char* path, const char* name, void* value,
                                     size_t size) noexcept {
  return XattrPath(
      path, true, -ENODATA, [&](const char* p) { return Real().getxattr(p, name, value, size); },
      [&](const fanstore::table::Entry& e) { return GetXattr(e, name, value, size); });
}
extern "C" ssize_t fanstore_lgetxattr(const char* path, const char* name, void* value,
                                      size_t size) noexcept {
  return XattrPath(
      path, false, -ENODATA, [&](const char* p) { return Real().lgetxattr(p, name, value, size); },
      [&](const fanstore::table::Entry& e) { return GetXattr(e, name, value, size); });
}
extern "C" ssize_t fanstore_fgetxattr(int fd, const char* name, void* value, size_t size) noexcept {
  return OnFd(
      fd, [&] { return Real().fgetxattr(fd, name, value, size); },
      [&](const fanstore::table::Entry& e) { return GetXattr(e, name, value, size); });
}
extern "C" ssize_t fanstore_listxattr(const char* path, char* list, size_t size) noexcept {
  return XattrPath(
      path, true, 0, [&](const char* p) { return Real().listxattr(p, list, size); },
      [&](const fanstore::table::Entry& e) { return ListXattr(e, list, size); });
}
extern "C" ssize_t fanstore_llistxattr(const char* path, char* list, size_t size) noexcept {
  return XattrPath(
      path, false, 0, [&](const char* p) { return Real().llistxattr(p, list, size); },
      [&](const fanstore::table::Entry& e) { return ListXattr(e, list, size); });
}
extern "C" ssize_t fanstore_flistxattr(int fd, char* list, size_t size) noexcept {
  return OnFd(
      fd, [&] { return Real().flistxattr(fd, list, size); },
      [&](const fanstore::table::Entry& e) { return ListXattr(e, list, size); });
}
