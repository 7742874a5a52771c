// Wrappers for directory streams and the composite functions built on them (scandir, nftw,
// ftw, glob). glibc's scandir/nftw/glob call its internal opendir and stat, which no wrapper
// reaches, so each gets its own wrapper: scandir and nftw are reimplemented over the table
// for virtual directories; glob is handed our directory functions via GLOB_ALTDIRFUNC.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <new>

#include "interceptor/vdir.h"
#include "interceptor/wrappers.h"

namespace fanstore::interceptor {
namespace {

using table::Entry;

// Function pointer casts between callback types whose arguments have the same layout
// (stat/stat64, dirent/dirent64), through the generic function type GCC exempts.
template <typename To, typename From>
To FnCast(From f) {
  return reinterpret_cast<To>(reinterpret_cast<void (*)()>(f));
}

DIR* OpenVirtualDir(const Walk& w, int* err) {
  if (w.err) {
    *err = w.err;
    return nullptr;
  }
  if (!table::IsDir(*w.entry)) {
    *err = ENOTDIR;
    return nullptr;
  }
  if (!Permitted(*w.entry, R_OK)) {  // listing needs read permission, as opendir's open does
    *err = EACCES;
    return nullptr;
  }
  VDir* v = NewVDir(Table().IndexOf(*w.entry), -1);
  if (!v) *err = ENOMEM;
  return reinterpret_cast<DIR*>(v);
}

// ---- scandir -------------------------------------------------------------------------------

using Filter = int (*)(const struct dirent64*);
using Compar = int (*)(const struct dirent64**, const struct dirent64**);

// scandir over a virtual directory. Callbacks run without the guard: they may stat paths
// under the mount themselves.
long ScanVirtual(const Walk& w, struct dirent64*** out, Filter filter, Compar compar) {
  int err = 0;
  DIR* d = OpenVirtualDir(w, &err);
  if (!d) return -err;
  VDir* v = AsVDir(d);
  struct dirent64** list = nullptr;
  size_t n = 0, cap = 0;
  long result = 0;
  while (struct dirent64* ent = NextEntry(Table(), v)) {
    if (filter) {
      Unguard unguard;
      if (!filter(ent)) continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      auto* grown = static_cast<struct dirent64**>(realloc(list, cap * sizeof *list));
      if (!grown) {
        result = -ENOMEM;
        break;
      }
      list = grown;
    }
    auto* copy = static_cast<struct dirent64*>(malloc(sizeof(struct dirent64)));
    if (!copy) {
      result = -ENOMEM;
      break;
    }
    memcpy(copy, ent, sizeof *copy);
    list[n++] = copy;
  }
  free(v);
  if (result < 0) {
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
    return result;
  }
  if (compar && n > 1) {
    Unguard unguard;
    qsort(list, n, sizeof *list, FnCast<int (*)(const void*, const void*)>(compar));
  }
  *out = list;
  return static_cast<long>(n);
}

int ScanAt(int dirfd, const char* path, struct dirent64*** out, Filter filter, Compar compar,
           int (*real_at)(int, const char*, struct dirent64***, Filter, Compar)) {
  return AsInt(OnPath(
      dirfd, path, true, false,
      [&](int d, const char* p) { return real_at(d, p, out, filter, compar); },
      [&](const Walk& w) { return ScanVirtual(w, out, filter, compar); }));
}

// ---- nftw ----------------------------------------------------------------------------------

using NftwFn = int (*)(const char*, const struct stat64*, int, struct FTW*);
using FtwFn = int (*)(const char*, const struct stat64*, int);

// Walks a virtual tree like glibc's nftw: same callback order (pre-order, or post-order with
// FTW_DEPTH), type flags, FTW_ACTIONRETVAL handling, and cycle avoidance (each directory once
// unless FTW_PHYS).
class NftwWalker {
 public:
  // Exactly one of fn (nftw) and ftw_fn (ftw) is set.
  NftwWalker(NftwFn fn, FtwFn ftw_fn, int flags) : fn_(fn), ftw_fn_(ftw_fn), flags_(flags) {}
  ~NftwWalker() { free(seen_); }

  // Walks from `start`, which Locate() resolved to w. Returns 0 with *result set to what
  // nftw returns, or an errno for a failure before or during the walk.
  int Run(const char* start, const Walk& w, int* result) {
    *result = 0;
    size_t len = strlen(start);
    if (len >= sizeof path_) return ENAMETOOLONG;
    memcpy(path_, start, len + 1);
    while (len > 1 && path_[len - 1] == '/') path_[--len] = '\0';
    int base = static_cast<int>(len);
    while (base > 0 && path_[base - 1] != '/') base--;
    const Entry* e = w.entry;
    int type;
    if (w.err) {
      // A dangling symlink as the start is reported (FTW_SLN); anything else fails the call.
      PathScratch s;
      Guard guard;
      Located l = Locate(AT_FDCWD, start, false, false, &s);
      if ((flags_ & FTW_PHYS) || !l.virt || l.walk.err || !table::IsLink(*l.walk.entry))
        return w.err;
      e = l.walk.entry;
      type = FTW_SLN;
    } else {
      type = TypeOf(*e);
    }
    if (flags_ & FTW_CHDIR) {
      if (!SaveCwd() || ChdirBaseOfStart(base) != 0) {
        int err = errno;
        RestoreCwd();
        return err;
      }
    }
    int r = Visit(*e, type, len, base, 0, nullptr);
    if (flags_ & FTW_CHDIR) RestoreCwd();
    if (r == kStop) {
      if (error_) return error_;
      *result = stop_value_;
    }
    return 0;
  }

 private:
  static constexpr int kStop = 1;  // internal: stop the walk and return stop_value_

  int TypeOf(const Entry& e) const {
    if (table::IsDir(e)) return FTW_D;
    if (table::IsLink(e)) return FTW_SL;
    return FTW_F;
  }

  // Calls the user's function; returns 0 to go on, kStop to stop, or a positive skip code.
  int Call(const Entry& e, int type, int base, int level, int* action) {
    struct stat64 st;
    Table().FillStat(e, reinterpret_cast<struct stat*>(&st));
    struct FTW ftw = {base, level};
    int t = type;
    if (ftw_fn_)
      t = (type == FTW_SL) ? FTW_F : (type == FTW_DP) ? FTW_D : (type == FTW_SLN) ? FTW_NS : type;
    int r;
    {
      Unguard unguard;
      r = ftw_fn_ ? ftw_fn_(path_, &st, t) : fn_(path_, &st, t, &ftw);
    }
    *action = FTW_CONTINUE;
    if (flags_ & FTW_ACTIONRETVAL) {
      if (r == FTW_STOP) {
        stop_value_ = r;
        return kStop;
      }
      *action = r;
      return 0;
    }
    if (r != 0) {
      stop_value_ = r;
      return kStop;
    }
    return 0;
  }

  bool Seen(const Entry& dir) {
    if (flags_ & FTW_PHYS) return false;
    uint32_t i = Table().IndexOf(dir);
    if (!seen_) {
      seen_ = static_cast<uint8_t*>(calloc(Table().size() / 8 + 1, 1));
      if (!seen_) return false;
    }
    bool was = seen_[i / 8] & (1u << (i % 8));
    seen_[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    return was;
  }

  // Visits e named by path_[0, len), whose basename starts at `base`. holder: the directory
  // the walk came from (nullptr for the start).
  int Visit(const Entry& e, int type, size_t len, int base, int level, const Entry* holder) {
    int action = FTW_CONTINUE;
    if (type != FTW_D) {
      if (Call(e, type, base, level, &action) == kStop) return kStop;
      return action == FTW_SKIP_SIBLINGS ? FTW_SKIP_SIBLINGS : 0;
    }
    if (Seen(e)) return 0;
    if (!(flags_ & FTW_DEPTH)) {
      if (Call(e, FTW_D, base, level, &action) == kStop) return kStop;
      if (action == FTW_SKIP_SUBTREE) return 0;
      if (action == FTW_SKIP_SIBLINGS) return FTW_SKIP_SIBLINGS;
    }
    if ((flags_ & FTW_CHDIR) && ChdirVirtual(e) != 0) return StopWithError(EIO);
    const table::TableView& t = Table();
    for (uint32_t child : t.Children(e)) {
      const Entry* c = &t.at(child);
      std::string_view name = t.Name(*c);
      if (len + 1 + name.size() >= sizeof path_) return StopWithError(ENAMETOOLONG);
      path_[len] = '/';
      memcpy(path_ + len + 1, name.data(), name.size());
      path_[len + 1 + name.size()] = '\0';
      int ctype = TypeOf(*c);
      if (ctype == FTW_SL && !(flags_ & FTW_PHYS)) {
        Walk w = Ns().Resolve(t.at(c->parent), name, true, scratch_.buf[0]);
        // As glibc's: a link that cannot be followed for another reason than a missing target
        // (a loop: ELOOP) ends the walk with that error.
        if (w.err && w.err != ENOENT && w.err != EACCES) return StopWithError(w.err);
        if (w.err || w.escaped) {
          ctype = FTW_SLN;
        } else {
          c = w.entry;
          ctype = TypeOf(*c);
        }
      }
      int r = Visit(*c, ctype, len + 1 + name.size(), static_cast<int>(len + 1), level + 1, &e);
      path_[len] = '\0';
      if (r == kStop) return kStop;
      if (r == FTW_SKIP_SIBLINGS) break;
    }
    // Like glibc, FTW_DP is reported while still inside the directory (FTW_CHDIR).
    if (flags_ & FTW_DEPTH) {
      if (Call(e, FTW_DP, base, level, &action) == kStop) return kStop;
    }
    if (flags_ & FTW_CHDIR) {
      // Back to the directory holding this one (for the start, the start's directory).
      int rc = holder ? ChdirVirtual(*holder) : ChdirBaseOfStart(base);
      if (rc != 0) return StopWithError(errno);
    }
    return (flags_ & FTW_DEPTH) && action == FTW_SKIP_SIBLINGS ? FTW_SKIP_SIBLINGS : 0;
  }

  int StopWithError(int err) {
    error_ = err ? err : EIO;
    return kStop;
  }

  int ChdirBaseOfStart(int base) {
    char dir[PATH_MAX];
    if (base == 0) return fanstore_fchdir(cwd_fd_);
    memcpy(dir, path_, base);
    dir[base] = '\0';
    return fanstore_chdir(dir);
  }

  bool SaveCwd() {
    cwd_fd_ = fanstore_open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return cwd_fd_ >= 0;
  }
  void RestoreCwd() {
    if (cwd_fd_ < 0) return;
    int saved = errno;
    (void)fanstore_fchdir(cwd_fd_);
    fanstore_close(cwd_fd_);
    errno = saved;
  }

  NftwFn fn_;
  FtwFn ftw_fn_;
  int flags_;
  int stop_value_ = 0;
  int error_ = 0;
  int cwd_fd_ = -1;
  uint8_t* seen_ = nullptr;
  char path_[PATH_MAX];
  PathScratch scratch_;
};

// nftw and ftw over a virtual tree; real() runs the libc function for anything else.
template <typename RealCall>
int Nftw(const char* path, NftwFn fn, FtwFn ftw_fn, int flags, RealCall&& real) {
  // The guard is not held while a walk runs, libc's or ours: the user's function may call any
  // wrapper. Escapes go to libc with the original path: it resolves ".." itself.
  return RoutePath(
      AT_FDCWD, path, !(flags & FTW_PHYS), false, real,
      [&](int, const char*) {
        Unguard unguard;
        return real();
      },
      [&](const Walk& w, const ErrnoSaver& saved) {
        Unguard unguard;
        auto* walker = static_cast<NftwWalker*>(malloc(sizeof(NftwWalker)));
        if (!walker) return AsInt(saved.Finish(-ENOMEM));
        new (walker) NftwWalker(fn, ftw_fn, flags);
        int result = 0;
        int err = walker->Run(path, w, &result);
        walker->~NftwWalker();
        free(walker);
        if (err) return AsInt(saved.Finish(-err));
        saved.Restore();
        return result;
      });
}

// ---- glob ----------------------------------------------------------------------------------

void* GlobOpendir(const char* path) { return fanstore_opendir(path); }
struct dirent* GlobReaddir(void* d) {
  return fanstore_readdir(static_cast<DIR*>(d));
}
void GlobClosedir(void* d) { fanstore_closedir(static_cast<DIR*>(d)); }
int GlobStat(const char* path, struct stat* st) { return fanstore_stat(path, st); }
int GlobLstat(const char* path, struct stat* st) { return fanstore_lstat(path, st); }

template <typename GlobT>
void UseOurDirFunctions(GlobT* g) {
  g->gl_opendir = GlobOpendir;
  g->gl_readdir = FnCast<decltype(g->gl_readdir)>(GlobReaddir);
  g->gl_closedir = GlobClosedir;
  g->gl_stat = FnCast<decltype(g->gl_stat)>(GlobStat);
  g->gl_lstat = FnCast<decltype(g->gl_lstat)>(GlobLstat);
}

}  // namespace
}  // namespace fanstore::interceptor

using namespace fanstore::interceptor;  // NOLINT: the wrappers below are the C entry points
namespace table = fanstore::table;

extern "C" DIR* fanstore_opendir(const char* path) noexcept {
  auto real = [](int, const char* p) { return Real().opendir(p); };
  return RoutePath(
      AT_FDCWD, path, true, false, [&] { return real(AT_FDCWD, path); }, real,
      [](const Walk& w, const ErrnoSaver& saved) {
        int err = 0;
        DIR* d = OpenVirtualDir(w, &err);
        saved.Finish(d ? 0 : -err);
        return d;
      });
}

extern "C" DIR* fanstore_fdopendir(int fd) noexcept {
  if (g_fds.Get(fd) == 0 || t_in_wrapper) return Real().fdopendir(fd);
  const Entry* e = TrackedEntry(fd);
  if (!e) return Real().fdopendir(fd);
  if (!table::IsDir(*e)) {
    errno = ENOTDIR;
    return nullptr;
  }
  ErrnoSaver saved;
  VDir* v = NewVDir(Table().IndexOf(*e), fd);  // the stream owns fd from now on
  saved.Finish(v ? 0 : -ENOMEM);
  return reinterpret_cast<DIR*>(v);
}

extern "C" struct dirent* fanstore_readdir(DIR* dir) noexcept {
  if (!IsVDir(dir)) return Real().readdir(dir);
  return reinterpret_cast<struct dirent*>(NextEntry(Table(), AsVDir(dir)));
}

extern "C" struct dirent64* fanstore_readdir64(DIR* dir) noexcept {
  if (!IsVDir(dir)) return Real().readdir64(dir);
  return NextEntry(Table(), AsVDir(dir));
}

extern "C" int fanstore_readdir_r(DIR* dir, struct dirent* entry, struct dirent** result) noexcept {
  if (!IsVDir(dir)) return Real().readdir_r(dir, entry, result);
  struct dirent64* next = NextEntry(Table(), AsVDir(dir));
  if (next) memcpy(entry, next, offsetof(struct dirent64, d_name) + strlen(next->d_name) + 1);
  *result = next ? entry : nullptr;
  return 0;
}

extern "C" int fanstore_readdir64_r(DIR* dir, struct dirent64* entry,
                                    struct dirent64** result) noexcept {
  if (!IsVDir(dir)) return Real().readdir64_r(dir, entry, result);
  struct dirent64* next = NextEntry(Table(), AsVDir(dir));
  if (next) memcpy(entry, next, offsetof(struct dirent64, d_name) + strlen(next->d_name) + 1);
  *result = next ? entry : nullptr;
  return 0;
}

extern "C" int fanstore_closedir(DIR* dir) noexcept {
  if (!IsVDir(dir)) return Real().closedir(dir);
  VDir* v = AsVDir(dir);
  if (v->fd >= 0) fanstore_close(v->fd);
  v->sentinel = 0;  // a use after close no longer looks like a VDir
  free(v);
  return 0;
}

extern "C" void fanstore_rewinddir(DIR* dir) noexcept {
  if (!IsVDir(dir)) return Real().rewinddir(dir);
  AsVDir(dir)->pos = 0;
}

extern "C" void fanstore_seekdir(DIR* dir, long pos) noexcept {
  if (!IsVDir(dir)) return Real().seekdir(dir, pos);
  AsVDir(dir)->pos = pos < 0 ? 0 : static_cast<uint64_t>(pos);
}

extern "C" long fanstore_telldir(DIR* dir) noexcept {
  if (!IsVDir(dir)) return Real().telldir(dir);
  return static_cast<long>(AsVDir(dir)->pos);
}

// A stream from opendir() gets its descriptor only when asked for one: most callers never do.
extern "C" int fanstore_dirfd(DIR* dir) noexcept {
  if (!IsVDir(dir)) return Real().dirfd(dir);
  VDir* v = AsVDir(dir);
  if (v->fd < 0) {
    Guard guard;
    ErrnoSaver saved;
    const Entry& e = Table().at(v->dir);
    int fd = OpenDirStandIn(e, O_CLOEXEC);
    if (fd >= 0) fd = TrackNew(fd, e);
    if (fd < 0) return AsInt(saved.Finish(fd));
    v->fd = fd;
    saved.Restore();
  }
  return v->fd;
}

extern "C" int fanstore_scandir(const char* path, struct dirent*** list,
                                int (*filter)(const struct dirent*),
                                int (*compar)(const struct dirent**,
                                              const struct dirent**)) noexcept {
  if (!Intercepting() || !MaybeOurs(AT_FDCWD, path))
    return Real().scandir(path, list, filter, compar);
  return ScanAt(AT_FDCWD, path, reinterpret_cast<struct dirent64***>(list), FnCast<Filter>(filter),
                FnCast<Compar>(compar), Real().scandirat64);
}

extern "C" int fanstore_scandir64(const char* path, struct dirent64*** list,
                                  int (*filter)(const struct dirent64*),
                                  int (*compar)(const struct dirent64**,
                                                const struct dirent64**)) noexcept {
  if (!Intercepting() || !MaybeOurs(AT_FDCWD, path))
    return Real().scandir64(path, list, filter, compar);
  return ScanAt(AT_FDCWD, path, list, filter, compar, Real().scandirat64);
}

extern "C" int fanstore_scandirat(int dirfd, const char* path, struct dirent*** list,
                                  int (*filter)(const struct dirent*),
                                  int (*compar)(const struct dirent**,
                                                const struct dirent**)) noexcept {
  return ScanAt(dirfd, path, reinterpret_cast<struct dirent64***>(list), FnCast<Filter>(filter),
                FnCast<Compar>(compar), Real().scandirat64);
}

extern "C" int fanstore_scandirat64(int dirfd, const char* path, struct dirent64*** list,
                                    int (*filter)(const struct dirent64*),
                                    int (*compar)(const struct dirent64**,
                                                  const struct dirent64**)) noexcept {
  return ScanAt(dirfd, path, list, filter, compar, Real().scandirat64);
}

extern "C" int fanstore_nftw(const char* path, __nftw_func_t fn, int nopenfd, int flags) noexcept {
  return Nftw(path, FnCast<NftwFn>(fn), nullptr, flags,
              [&] { return Real().nftw(path, fn, nopenfd, flags); });
}

extern "C" int fanstore_nftw64(const char* path, __nftw64_func_t fn, int nopenfd,
                               int flags) noexcept {
  return Nftw(path, fn, nullptr, flags, [&] { return Real().nftw64(path, fn, nopenfd, flags); });
}

// ftw(path, fn, n) is nftw without flags and with the three-argument callback.
extern "C" int fanstore_ftw(const char* path, __ftw_func_t fn, int nopenfd) noexcept {
  return Nftw(path, nullptr, FnCast<FtwFn>(fn), 0, [&] { return Real().ftw(path, fn, nopenfd); });
}

extern "C" int fanstore_ftw64(const char* path, __ftw64_func_t fn, int nopenfd) noexcept {
  return Nftw(path, nullptr, fn, 0, [&] { return Real().ftw64(path, fn, nopenfd); });
}

// glob: every glob goes through our directory functions (GLOB_ALTDIRFUNC), which pass
// non-mount paths straight to libc; a pattern may reach the mount from anywhere ("*/x").
// Callers that bring their own directory functions are left alone.
extern "C" int fanstore_glob(const char* pattern, int flags, int (*errfunc)(const char*, int),
                             glob_t* pglob) noexcept {
  if (!Intercepting() || (flags & GLOB_ALTDIRFUNC) || !pglob)
    return Real().glob(pattern, flags, errfunc, pglob);
  UseOurDirFunctions(pglob);
  return Real().glob(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
}

extern "C" int fanstore_glob64(const char* pattern, int flags, int (*errfunc)(const char*, int),
                               glob64_t* pglob) noexcept {
  if (!Intercepting() || (flags & GLOB_ALTDIRFUNC) || !pglob)
    return Real().glob64(pattern, flags, errfunc, pglob);
  UseOurDirFunctions(pglob);
  return Real().glob64(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
}
