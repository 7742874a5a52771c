// fanstore-preload-probe: exercises the libc calls that real programs make, under a root
// directory, and prints what it saw with that root replaced by "R". The integration test runs
// it on a source tree directly and on the same tree served at a virtual mount, and compares.
// It also checks internally what must agree in one process (fstat of an open descriptor
// equals stat of its path, descriptors survive dup, ...) and prints "MISMATCH" lines if not.
//
//   fanstore-preload-probe ROOT
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

std::string g_root;
int g_mismatches = 0;

std::string Rel(const char* p) {
  std::string s(p);
  if (s.compare(0, g_root.size(), g_root) == 0) return "R" + s.substr(g_root.size());
  return s;
}

// The attributes that are the same on the source and at the mount (not dev, ino, ctime).
// Directory sizes are left out: they are file-system specific.
std::string Attrs(const struct stat& st) {
  char buf[128];
  snprintf(buf, sizeof buf, "mode=%o nlink=%lu size=%lld mtime=%lld.%09ld", st.st_mode,
           static_cast<unsigned long>(st.st_nlink),
           S_ISDIR(st.st_mode) ? -1LL : static_cast<long long>(st.st_size),
           static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec);
  return buf;
}

bool Same(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mode == b.st_mode && a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
         a.st_mtim.tv_nsec == b.st_mtim.tv_nsec && a.st_ctim.tv_sec == b.st_ctim.tv_sec &&
         a.st_ctim.tv_nsec == b.st_ctim.tv_nsec && a.st_nlink == b.st_nlink;
}

void Expect(bool ok, const std::string& what) {
  if (!ok) {
    printf("MISMATCH %s (errno %s)\n", what.c_str(), strerror(errno));
    g_mismatches++;
  }
}

const char* Type(int flag) {
  switch (flag) {
    case FTW_F:
      return "F";
    case FTW_D:
      return "D";
    case FTW_DNR:
      return "DNR";
    case FTW_NS:
      return "NS";
    case FTW_SL:
      return "SL";
    case FTW_DP:
      return "DP";
    case FTW_SLN:
      return "SLN";
    default:
      return "?";
  }
}

// nftw reports in readdir order, which differs between file systems: lines are collected
// and printed sorted; the order itself is checked here (pre-order, or post-order with
// FTW_DEPTH).
std::vector<std::string> g_lines;
std::vector<std::string> g_seen_paths;
bool g_print_cwd = false;

void CheckOrder(const char* path, int flag) {
  std::string p(path);
  for (const std::string& seen : g_seen_paths) {
    bool seen_is_child =
        seen.size() > p.size() && seen.compare(0, p.size(), p) == 0 && seen[p.size()] == '/';
    if (flag == FTW_D && seen_is_child)
      Expect(false, "pre-order: " + p + " after its child " + seen);
  }
  if (flag == FTW_DP) {
    for (const std::string& seen : g_seen_paths)
      if (seen == p) Expect(false, "post-order: " + p + " reported twice");
  }
  g_seen_paths.push_back(p);
}

void FlushLines() {
  std::sort(g_lines.begin(), g_lines.end());
  for (const std::string& l : g_lines) printf("%s\n", l.c_str());
  g_lines.clear();
  g_seen_paths.clear();
}

int NftwPrint(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  std::string line = "  " + Rel(path) + " " + Type(flag) + " level=" + std::to_string(ftw->level) +
                     " base=" + (ftw->level ? std::string(path + ftw->base) : "<top>");
  if (flag != FTW_NS) line += " " + Attrs(*st);
  if (g_print_cwd) {
    char cwd[PATH_MAX];
    std::string c = getcwd(cwd, sizeof cwd) ? Rel(cwd) : "?";
    line += " cwd=" + (c[0] == 'R' ? c : "outside");
  }
  g_lines.push_back(line);
  CheckOrder(path, flag);
  // The attributes nftw reports are what stat says.
  struct stat again;
  if (flag == FTW_F || flag == FTW_D || flag == FTW_DP) {
    if (g_print_cwd) {
      // glibc reports FTW_DP from inside the directory, so only the others are relative.
      if (flag != FTW_DP)
        Expect(lstat(path + ftw->base, &again) == 0, "relative stat under FTW_CHDIR");
    } else {
      Expect(stat(path, &again) == 0 && Same(again, *st), std::string("nftw stat ") + path);
    }
  }
  return 0;
}

int FtwPrint(const char* path, const struct stat* st, int flag) {
  g_lines.push_back("  " + Rel(path) + " " + Type(flag) + " " + (flag == FTW_NS ? "" : Attrs(*st)));
  return 0;
}

int StopAtSecond(const char*, const struct stat*, int, struct FTW*) {
  static int n = 0;
  return ++n == 2 ? 42 : 0;
}

void Nftw() {
  // Following symlinks visits each directory once, so what is reported depends on the
  // order: that walk stays in a tree without directory symlinks (a).
  for (int flags :
       {int{FTW_PHYS}, 0, FTW_PHYS | FTW_DEPTH, FTW_PHYS | FTW_CHDIR, FTW_CHDIR | FTW_DEPTH}) {
    std::string top = flags & FTW_PHYS ? g_root : g_root + "/a";
    printf("nftw %s flags=%d\n", Rel(top.c_str()).c_str(), flags);
    g_print_cwd = flags & FTW_CHDIR;
    char before[PATH_MAX], after[PATH_MAX];
    Expect(getcwd(before, sizeof before) != nullptr, "getcwd");
    int r = nftw(top.c_str(), NftwPrint, 8, flags);
    FlushLines();
    printf("  -> %d\n", r);
    Expect(getcwd(after, sizeof after) && strcmp(before, after) == 0, "nftw restores the cwd");
  }
  g_print_cwd = false;
  printf("nftw stop -> %d\n", nftw(g_root.c_str(), StopAtSecond, 8, FTW_PHYS));
  g_lines.clear();
  errno = 0;
  int r = nftw((g_root + "/nope").c_str(), NftwPrint, 8, 0);
  printf("nftw missing -> %d %s\n", r, strerror(errno));
  r = nftw((g_root + "/dangling").c_str(), NftwPrint, 8, 0);
  FlushLines();
  printf("nftw dangling -> %d\n", r);
  printf("ftw\n");
  r = ftw((g_root + "/a").c_str(), FtwPrint, 8);
  FlushLines();
  printf("  -> %d\n", r);
}

int NoDots(const struct dirent* d) {
  return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

void Scandir(const std::string& dir) {
  struct dirent** list;
  int n = scandir(dir.c_str(), &list, NoDots, alphasort);
  printf("scandir %s -> %d:", Rel(dir.c_str()).c_str(), n);
  for (int i = 0; i < n; i++) {
    printf(" %s/%d", list[i]->d_name, list[i]->d_type);
    free(list[i]);
  }
  if (n >= 0) free(list);
  printf("\n");
}

void Glob(const std::string& pattern, int flags) {
  glob_t g;
  int r = glob(pattern.c_str(), flags, nullptr, &g);
  printf("glob %s -> %d:", Rel(pattern.c_str()).c_str(), r);
  for (size_t i = 0; r == 0 && i < g.gl_pathc; i++) printf(" %s", Rel(g.gl_pathv[i]).c_str());
  printf("\n");
  if (r == 0) globfree(&g);
}

void Streams() {
  DIR* d = opendir((g_root + "/a").c_str());
  if (!d) {
    printf("opendir failed\n");
    return;
  }
  std::vector<std::string> first;
  long mark = -1;
  while (struct dirent* e = readdir(d)) {
    first.push_back(e->d_name);
    if (first.size() == 2) mark = telldir(d);
  }
  seekdir(d, mark);
  struct dirent* e = readdir(d);
  Expect(e && first.size() > 2 && first[2] == e->d_name, "seekdir/telldir");
  rewinddir(d);
  struct dirent entry, *res;
  size_t n = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  while (readdir_r(d, &entry, &res) == 0 && res) n++;
#pragma GCC diagnostic pop
  Expect(n == first.size(), "readdir_r after rewinddir");
  int fd = dirfd(d);
  struct stat a, b;
  Expect(fd >= 0 && fstat(fd, &a) == 0 && stat((g_root + "/a").c_str(), &b) == 0 && Same(a, b),
         "dirfd fstat");
  struct stat child;
  Expect(fstatat(fd, "x.txt", &child, 0) == 0 && child.st_size == 6, "fstatat(dirfd(opendir))");
  closedir(d);
  printf("readdir a: %zu entries\n", first.size());
}

void Descriptors() {
  const std::string file = g_root + "/a/x.txt";
  struct stat by_path, by_fd, at, empty, dupst;
  int fd = open(file.c_str(), O_RDONLY);
  Expect(fd >= 0, "open");
  Expect(stat(file.c_str(), &by_path) == 0 && fstat(fd, &by_fd) == 0 && Same(by_path, by_fd),
         "fstat == stat");
  Expect(fstatat(fd, "", &empty, AT_EMPTY_PATH) == 0 && Same(by_path, empty),
         "fstatat AT_EMPTY_PATH");
  struct statx sx;
  Expect(statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0 &&
             sx.stx_ino == by_path.st_ino &&
             sx.stx_size == static_cast<uint64_t>(by_path.st_size) &&
             sx.stx_ctime.tv_sec == by_path.st_ctim.tv_sec &&
             sx.stx_ctime.tv_nsec == static_cast<uint32_t>(by_path.st_ctim.tv_nsec),
         "statx AT_EMPTY_PATH");
  struct statx sp;
  Expect(statx(AT_FDCWD, file.c_str(), 0, STATX_BASIC_STATS, &sp) == 0 &&
             sp.stx_ino == sx.stx_ino && sp.stx_dev_major == sx.stx_dev_major &&
             sp.stx_dev_minor == sx.stx_dev_minor &&
             makedev(sp.stx_dev_major, sp.stx_dev_minor) == by_path.st_dev,
         "statx path");
  int d1 = dup(fd), d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100), d3 = dup2(fd, 200),
      d4 = dup3(fd, 201, O_CLOEXEC);
  for (int d : {d1, d2, d3, d4})
    Expect(d >= 0 && fstat(d, &dupst) == 0 && Same(dupst, by_path), "fstat of a dup");
  for (int d : {d1, d2, d3, d4}) close(d);
  char buf[16] = {};
  Expect(pread(fd, buf, sizeof buf, 0) == 6 && strcmp(buf, "hello\n") == 0, "pread");
  close(fd);
  // The number is free again; a real file must now get real attributes.
  int other = open("/dev/null", O_RDONLY);
  struct stat null_st;
  Expect(other >= 0 && fstat(other, &null_st) == 0 && S_ISCHR(null_st.st_mode),
         "closed numbers are forgotten");
  close(other);

  int dir = open((g_root + "/a").c_str(), O_RDONLY | O_DIRECTORY);
  Expect(dir >= 0, "open dir");
  Expect(fstatat(dir, "x.txt", &at, 0) == 0 && Same(at, by_path), "fstatat(dirfd)");
  int sub = openat(dir, "b", O_RDONLY | O_DIRECTORY);
  Expect(sub >= 0, "openat dir");
  int f = openat(sub, "../x.txt", O_RDONLY);
  Expect(f >= 0 && fstat(f, &by_fd) == 0 && Same(by_fd, by_path), "openat(dirfd, ../x)");
  close(f);
  Expect(faccessat(dir, "x.txt", R_OK, 0) == 0, "faccessat");
  DIR* ds = fdopendir(sub);
  size_t n = 0;
  while (readdir(ds)) n++;
  printf("fdopendir b: %zu entries\n", n);
  closedir(ds);
  int root = open(g_root.c_str(), O_RDONLY | O_DIRECTORY);
  char target[64] = {};
  Expect(readlinkat(root, "link", target, sizeof target) == 3 && strcmp(target, "a/b") == 0,
         "readlinkat");
  int lfd = openat(root, "link", O_PATH | O_NOFOLLOW);
  memset(target, 0, sizeof target);
  Expect(lfd >= 0 && readlinkat(lfd, "", target, sizeof target) == 3,
         "readlinkat of an O_PATH link");
  Expect(fstatat(lfd, "", &at, AT_EMPTY_PATH) == 0 && S_ISLNK(at.st_mode),
         "fstat of an O_PATH link");
  close(lfd);
  Expect(openat(root, "link", O_RDONLY | O_NOFOLLOW) < 0 && errno == ELOOP, "O_NOFOLLOW on a link");
  Expect(openat(root, "a/x.txt", O_RDONLY | O_DIRECTORY) < 0 && errno == ENOTDIR,
         "O_DIRECTORY on a file");
  Expect(openat(dir, "x.txt/", O_RDONLY) < 0 && errno == ENOTDIR, "trailing slash on a file");
  Expect(fchdir(dir) == 0, "fchdir");
  char cwd[PATH_MAX];
  Expect(getcwd(cwd, sizeof cwd) && Rel(cwd) == "R/a", "getcwd after fchdir");
  Expect(access("x.txt", R_OK) == 0, "relative access after fchdir");
  Expect(chdir("b/c") == 0 && getcwd(cwd, sizeof cwd) && Rel(cwd) == "R/a/b/c", "relative chdir");
  Expect(chdir("../../..") == 0 && getcwd(cwd, sizeof cwd) && Rel(cwd) == "R", "chdir ..");
  Expect(chdir("/") == 0, "chdir /");
  close(dir);
  close(root);
}

void Stdio() {
  FILE* f = fopen((g_root + "/a/x.txt").c_str(), "re");
  char line[64] = {};
  Expect(f && fgets(line, sizeof line, f) && strcmp(line, "hello\n") == 0, "fopen");
  struct stat st;
  Expect(f && fstat(fileno(f), &st) == 0 && st.st_size == 6, "fstat(fileno(fopen))");
  FILE* g = f ? freopen((g_root + "/a/b/c/deep.txt").c_str(), "r", f) : nullptr;
  memset(line, 0, sizeof line);
  Expect(g && fgets(line, sizeof line, g) && strcmp(line, "deep\n") == 0, "freopen");
  Expect(g && fstat(fileno(g), &st) == 0 && st.st_size == 5, "fstat(fileno(freopen))");
  if (g) fclose(g);
}

void Names() {
  char buf[PATH_MAX];
  printf("realpath link/c: %s\n",
         realpath((g_root + "/link/c").c_str(), buf) ? Rel(buf).c_str() : strerror(errno));
  char* r = realpath((g_root + "/a/./b/../x.txt").c_str(), nullptr);
  printf("realpath a/./b/../x.txt: %s\n", r ? Rel(r).c_str() : strerror(errno));
  free(r);
  printf("realpath nope: %s\n", realpath((g_root + "/nope").c_str(), buf) ? "?" : strerror(errno));
  ssize_t n = readlink((g_root + "/link").c_str(), buf, sizeof buf);
  printf("readlink link: %.*s\n", static_cast<int>(n), buf);
  n = readlink((g_root + "/a").c_str(), buf, sizeof buf);
  printf("readlink a: %zd %s\n", n, strerror(errno));
  Expect(chdir((g_root + "/a/b").c_str()) == 0, "chdir");
  char* cwd = get_current_dir_name();
  printf("cwd: %s %s\n", Rel(getcwd(buf, sizeof buf)).c_str(), cwd ? Rel(cwd).c_str() : "?");
  free(cwd);
  errno = 0;
  printf("getcwd small: %s\n", getcwd(buf, 3) ? "?" : strerror(errno));
  Expect(chdir("/") == 0, "chdir /");
}

// Prints "what: ok" or "what: ENAME". errno is read first, before anything can change it.
void Report(const char* what, long rc) {
  int err = errno;
  printf("%s: %s\n", what, rc >= 0 ? "ok" : strerrorname_np(err));
  errno = 0;
}

// The errors of a read-only file system, compared with a real read-only mount.
void Errors() {
  const std::string R = g_root;
  struct stat st;
  errno = 0;
  Report("open missing", open((R + "/nope").c_str(), O_RDONLY));
  Report("stat file/x", stat((R + "/a/x.txt/x").c_str(), &st));
  Report("stat missing/x", stat((R + "/nope/x").c_str(), &st));
  Report("lstat dangling", lstat((R + "/dangling").c_str(), &st));
  Report("stat dangling", stat((R + "/dangling").c_str(), &st));
  Report("open O_CREAT new", open((R + "/new").c_str(), O_WRONLY | O_CREAT, 0644));
  Report("open O_CREAT in missing dir", open((R + "/nope/new").c_str(), O_WRONLY | O_CREAT, 0644));
  Report("open O_CREAT|O_EXCL existing",
         open((R + "/a/x.txt").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644));
  Report("open O_RDONLY|O_CREAT existing",
         open((R + "/a/x.txt").c_str(), O_RDONLY | O_CREAT, 0644));
  Report("open O_RDWR", open((R + "/a/x.txt").c_str(), O_RDWR));
  Report("open O_WRONLY missing", open((R + "/nope").c_str(), O_WRONLY));
  Report("open O_TRUNC", open((R + "/a/x.txt").c_str(), O_RDONLY | O_TRUNC));
  Report("open dir O_WRONLY", open((R + "/a").c_str(), O_WRONLY));
  Report("open dir O_CREAT", open((R + "/a").c_str(), O_RDONLY | O_CREAT, 0644));
  Report("open new/ O_CREAT", open((R + "/newdir/").c_str(), O_RDONLY | O_CREAT, 0644));
  Report("open O_TMPFILE", open((R + "/a").c_str(), O_RDWR | O_TMPFILE, 0600));
  Report("open O_DIRECTORY file", open((R + "/a/x.txt").c_str(), O_RDONLY | O_DIRECTORY));
  Report("open O_NOFOLLOW link", open((R + "/link").c_str(), O_RDONLY | O_NOFOLLOW));
  Report("open file/", open((R + "/a/x.txt/").c_str(), O_RDONLY));
  Report("creat", creat((R + "/a/x.txt").c_str(), 0644));
  Report("mkdir existing", mkdir((R + "/a").c_str(), 0755));
  Report("mkdir existing file", mkdir((R + "/a/x.txt").c_str(), 0755));
  Report("mkdir new", mkdir((R + "/newdir").c_str(), 0755));
  Report("mkdir missing parent", mkdir((R + "/nope/x").c_str(), 0755));
  Report("mkdir under file", mkdir((R + "/a/x.txt/x").c_str(), 0755));
  Report("mkfifo new", mkfifo((R + "/fifo").c_str(), 0644));
  Report("unlink file", unlink((R + "/a/x.txt").c_str()));
  Report("unlink missing", unlink((R + "/nope").c_str()));
  Report("unlink missing/x", unlink((R + "/nope/x").c_str()));
  Report("unlink dir", unlink((R + "/a").c_str()));
  Report("unlinkat AT_REMOVEDIR", unlinkat(AT_FDCWD, (R + "/empty").c_str(), AT_REMOVEDIR));
  Report("rmdir dir", rmdir((R + "/empty").c_str()));
  Report("rmdir missing", rmdir((R + "/nope").c_str()));
  Report("rmdir .", rmdir((R + "/empty/.").c_str()));
  Report("rename", rename((R + "/a/x.txt").c_str(), (R + "/a/y.txt").c_str()));
  Report("rename missing", rename((R + "/nope").c_str(), (R + "/a/y.txt").c_str()));
  Report("rename out", rename((R + "/a/x.txt").c_str(), "/tmp/fanstore-probe-nope"));
  Report("symlink new", symlink("x", (R + "/newlink").c_str()));
  Report("symlink existing", symlink("x", (R + "/a/x.txt").c_str()));
  Report("link new", link((R + "/a/x.txt").c_str(), (R + "/a/x2.txt").c_str()));
  Report("link missing", link((R + "/nope").c_str(), (R + "/a/x2.txt").c_str()));
  Report("link onto existing", link((R + "/a/x.txt").c_str(), (R + "/empty").c_str()));
  Report("chmod", chmod((R + "/a/x.txt").c_str(), 0600));
  Report("chmod missing", chmod((R + "/nope").c_str(), 0600));
  Report("chown", chown((R + "/a/x.txt").c_str(), 0, 0));
  Report("lchown link", lchown((R + "/link").c_str(), 0, 0));
  Report("truncate", truncate((R + "/a/x.txt").c_str(), 0));
  Report("truncate dir", truncate((R + "/a").c_str(), 0));
  Report("truncate missing", truncate((R + "/nope").c_str(), 0));
  Report("utimensat", utimensat(AT_FDCWD, (R + "/a/x.txt").c_str(), nullptr, 0));
  Report("utimes missing", utimes((R + "/nope").c_str(), nullptr));
  Report("access W_OK", access((R + "/a/x.txt").c_str(), W_OK));
  Report("access R_OK", access((R + "/a/x.txt").c_str(), R_OK));
  Report("access X_OK dir", access((R + "/a").c_str(), X_OK));
  Report("access missing", access((R + "/nope").c_str(), F_OK));
  Report("setxattr", setxattr((R + "/a/x.txt").c_str(), "user.x", "1", 1, 0));
  Report("setxattr missing", setxattr((R + "/nope").c_str(), "user.x", "1", 1, 0));
  Report("removexattr", removexattr((R + "/a/x.txt").c_str(), "user.x"));
  Report("getxattr", getxattr((R + "/a/x.txt").c_str(), "user.x", nullptr, 0));
  Report("getxattr missing", getxattr((R + "/nope").c_str(), "user.x", nullptr, 0));
  Report("listxattr", listxattr((R + "/a/x.txt").c_str(), nullptr, 0));
  int fd = open((R + "/a/x.txt").c_str(), O_RDONLY);
  Report("fchmod", fchmod(fd, 0600));
  Report("fchown", fchown(fd, 0, 0));
  Report("futimens", futimens(fd, nullptr));
  Report("fsetxattr", fsetxattr(fd, "user.x", "1", 1, 0));
  Report("fgetxattr", fgetxattr(fd, "user.x", nullptr, 0));
  Report("write", write(fd, "x", 1));
  Report("fopen r+", fopen((R + "/a/x.txt").c_str(), "r+") ? 0 : -1);
  Report("fopen w missing dir", fopen((R + "/nope/x").c_str(), "w") ? 0 : -1);
  close(fd);
  struct statfs sfs;
  Report("statfs", statfs(R.c_str(), &sfs));
  printf("statfs read-only: %d\n", (sfs.f_flags & ST_RDONLY) != 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fanstore-preload-probe ROOT walk|errors\n");
    return 2;
  }
  g_root = argv[1];
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (strcmp(argv[2], "walk") == 0) {
    Nftw();
    Scandir(g_root);
    Scandir(g_root + "/a");
    Scandir(g_root + "/nope");
    Glob(g_root + "/*", 0);
    Glob(g_root + "/*/*", GLOB_MARK);
    Glob(g_root + "/a/[bx]*", 0);
    Glob(g_root + "/nope*", GLOB_NOCHECK);
    Streams();
    Descriptors();
    Stdio();
    Names();
  } else {
    Errors();
  }
  return g_mismatches ? 1 : 0;
}
