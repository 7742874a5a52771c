#!/usr/bin/python3
"""The real-client matrix (issue 15): every case a program may try on a read-only dataset,
one line each, "case: result". Run against FanStore and against a read-only bind mount of the
same tree, as the same user; matrix_test.sh compares the two outputs line by line, so no
expected value is written here. A result is what the program sees: the bytes (as a hash), the
fields, the exit status, or the errno's name.

matrix.py ROOT   (the working directory is a scratch directory the case may write)

Left out of every comparison, because they name the file system rather than the dataset: st_dev,
st_ino (FanStore's are stable hashes of the path), st_atime (reading changes it on the
reference, never on a dataset), f_type, f_fsid and the block counts of statfs. The ctime, the
directory sizes and the extended attributes ("user." ones: the only namespace a dataset
carries) are the packed tree's, and are compared.
"""
import ctypes
import ctypes.util
import errno
import hashlib
import mmap
import os
import stat
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
BUSYBOX = "/bin/busybox"  # static: no LD_PRELOAD reaches it


def p(rel):
    return os.path.join(ROOT, rel)


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def attempt(fn):
    try:
        r = fn()
        return "ok" if r is None else str(r)
    except OSError as e:
        return err(e)


def cerr(rc):
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def st_fields(s):
    typ = stat.S_IFMT(s.st_mode)
    return f"mode={oct(s.st_mode)} nlink={s.st_nlink if typ != stat.S_IFDIR else '-'} uid={s.st_uid} gid={s.st_gid} size={s.st_size} blocks={s.st_blocks} mtime_ns={s.st_mtime_ns} ctime_ns={s.st_ctime_ns}"


def sh(cmd, cwd=None, env=None):
    r = subprocess.run(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env, capture_output=True)
    text = r.stdout.decode(errors="replace").replace(ROOT, "ROOT").strip().replace("\n", " | ")
    out = hashlib.sha1(text.encode()).hexdigest()[:12] if len(text) > 200 else text
    return f"exit={r.returncode} out={out}"


def no_preload():
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    return e


def tree():
    out = []
    for d, dirs, files in os.walk(ROOT):
        dirs.sort()
        rel = os.path.relpath(d, ROOT)
        out.append(f"{rel}/ [{', '.join(sorted(dirs + files))}]")
    return hashlib.sha1("\n".join(out).encode()).hexdigest()[:12]


def contents():
    h = hashlib.sha1()
    for d, dirs, files in os.walk(ROOT):
        dirs.sort()
        for f in sorted(files):
            fp = os.path.join(d, f)
            h.update(os.path.relpath(fp, ROOT).encode())
            try:
                with open(fp, "rb") as fh:
                    h.update(fh.read())
            except OSError as e:
                h.update(err(e).encode())
    return h.hexdigest()[:12]


def getfl(flags):
    fd = os.open(p("a/b/numbers.txt"), flags)
    try:
        fl = libc.fcntl(fd, 3)  # F_GETFL
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
        n = os.preadv(fd, [buf], 0)
        return f"flags={oct(fl & ~0o100000)} read={n}"  # O_LARGEFILE is the ABI's, not the file's
    finally:
        os.close(fd)


def setfl_noatime():
    fd = os.open(p("a/b/numbers.txt"), os.O_RDONLY)
    try:
        r = cerr(libc.fcntl(fd, 4, os.O_NOATIME))  # F_SETFL
        return f"{r} flags={oct(libc.fcntl(fd, 3) & ~0o100000)}"
    finally:
        os.close(fd)


def seek(rel, whence, off):
    fd = os.open(p(rel), os.O_RDONLY)
    try:
        return os.lseek(fd, off, whence)
    finally:
        os.close(fd)


def raw_getdents(rel):
    fd = os.open(p(rel), os.O_RDONLY | os.O_DIRECTORY)
    buf, names = ctypes.create_string_buffer(1 << 16), []
    try:
        while (n := libc.syscall(217, fd, buf, len(buf))) > 0:
            off = 0
            while off < n:
                reclen = int.from_bytes(buf.raw[off + 16:off + 18], "little")
                names.append(buf.raw[off + 19:off + reclen].split(b"\0", 1)[0].decode())
                off += reclen
    finally:
        os.close(fd)
    return sorted(x for x in names if x not in (".", ".."))


def nftw_walk():
    seen = []
    CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)

    def cb(path, sb, flag, ftw):
        seen.append(f"{os.path.relpath(path.decode(), ROOT)}:{flag}")
        return 0
    rc = libc.nftw(ROOT.encode(), CB(cb), 16, 0)  # follows symlinks: the loop gives FTW_SLN or ELOOP
    # What was visited before an error depends on the directory order, which is the file system's.
    return f"rc={rc} {cerr(rc)}" if rc < 0 else f"rc=0 {hashlib.sha1(' '.join(sorted(seen)).encode()).hexdigest()[:12]}"


def fts_walk():
    libc.fts_open.restype = ctypes.c_void_p
    libc.fts_read.restype = ctypes.c_void_p
    argv = (ctypes.c_char_p * 2)(ROOT.encode(), None)
    fts = libc.fts_open(argv, 0x0010, None)  # FTS_PHYSICAL
    if not fts:
        return cerr(-1)
    paths = []
    while (ent := libc.fts_read(ctypes.c_void_p(fts))):
        path = ctypes.c_char_p.from_address(ent + 48).value.decode()  # FTSENT.fts_path
        info = ctypes.c_ushort.from_address(ent + 98).value           # FTSENT.fts_info
        paths.append(f"{os.path.relpath(path, ROOT)}:{info}")
    libc.fts_close(ctypes.c_void_p(fts))
    return f"n={len(paths)} {hashlib.sha1(' '.join(sorted(paths)).encode()).hexdigest()[:12]}"


def proc_fd_name(proc="/proc/self"):
    fd = os.open(p("a/hello.txt"), os.O_RDONLY)
    try:
        return os.readlink(f"{proc}/fd/{fd}").replace(ROOT, "ROOT")
    finally:
        os.close(fd)


def proc_fd_reopen_write():
    fd = os.open(p("a/b/numbers.txt"), os.O_RDONLY)
    try:
        return attempt(lambda: os.close(os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)))
    finally:
        os.close(fd)


def openat_write():
    d = os.open(p("a"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        return attempt(lambda: os.close(os.open("hello.txt", os.O_WRONLY, dir_fd=d))) + " " + \
            attempt(lambda: os.close(os.open("new.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=d)))
    finally:
        os.close(d)


def relative_remove():
    old = os.getcwd()
    os.chdir(p("a/b"))
    try:
        return cerr(libc.remove(b"numbers.txt"))
    finally:
        os.chdir(old)


def inotify():
    fd = libc.inotify_init1(0o2000000)
    try:
        return cerr(libc.inotify_add_watch(fd, p("a").encode(), 0x00000100))  # IN_CREATE
    finally:
        os.close(fd)


def utime_omit():
    UTIME_OMIT = (1 << 30) - 2
    ts = (ctypes.c_long * 4)(0, UTIME_OMIT, 0, UTIME_OMIT)
    return cerr(libc.utimensat(-100, p("a/empty.txt").encode(), ts, 0))


def noatime():
    return attempt(lambda: os.close(os.open(p("a/b/numbers.txt"), os.O_RDONLY | os.O_NOATIME)))


def statvfs():
    s = os.statvfs(p("a"))
    return f"rdonly={bool(s.f_flag & os.ST_RDONLY)} namemax={s.f_namemax}"


def hardlinks():
    a, b = os.stat(p("hard/one")), os.stat(p("hard/two"))
    return f"nlink={a.st_nlink},{b.st_nlink} same_inode={a.st_ino == b.st_ino and a.st_dev == b.st_dev}"


def sparse_seek():
    return f"data={attempt(lambda: seek('sparse.bin', os.SEEK_DATA, 0))} hole={attempt(lambda: seek('sparse.bin', os.SEEK_HOLE, 0))}"


def raw_statx(rel):
    buf = ctypes.create_string_buffer(256)
    if libc.syscall(332, -100, p(rel).encode(), 0, 0x7FF, buf) != 0:  # SYS_statx, AT_FDCWD
        return cerr(-1)
    mode = int.from_bytes(buf.raw[0x1C:0x1E], "little")
    size = int.from_bytes(buf.raw[0x28:0x30], "little")
    return f"mode={oct(mode)} size={size}"


def getxattr_c(rel, name, size, follow=True):
    """getxattr(2)/lgetxattr(2) with a buffer of `size`: the length, the value, or the errno."""
    buf = ctypes.create_string_buffer(max(size, 1))
    fn = libc.getxattr if follow else libc.lgetxattr
    n = fn(p(rel).encode(), name.encode(), buf if size else None, ctypes.c_size_t(size))
    return cerr(n) if n < 0 else f"{n} {buf.raw[:n] if size else ''}"


def fgetxattr(rel, name):
    fd = os.open(p(rel), os.O_RDONLY)
    try:
        return attempt(lambda: os.getxattr(fd, name)) + " " + attempt(lambda: sorted(os.listxattr(fd)))
    finally:
        os.close(fd)


def mkstemp_in():
    try:
        fd, name = tempfile.mkstemp(dir=p("a"))
        os.close(fd)
        return "created " + os.path.basename(name)[:3]
    except OSError as e:
        return err(e)


CASES = [
    # --- reading, through the library
    ("tree", tree),
    ("contents", contents),
    ("stat file", lambda: st_fields(os.stat(p("a/b/numbers.txt")))),
    ("stat 0600 file", lambda: st_fields(os.stat(p("a/hello.txt")))),
    ("stat dir", lambda: st_fields(os.stat(p("a/b")))),
    ("stat root", lambda: st_fields(os.stat(ROOT))),
    ("lstat symlink", lambda: st_fields(os.lstat(p("a/link-to-numbers")))),
    ("readlink", lambda: os.readlink(p("a/link-to-numbers"))),
    ("stat through dir symlink", lambda: st_fields(os.stat(p("dirlink/numbers.txt")))),
    ("realpath", lambda: os.path.realpath(p("dirlink/numbers.txt")).replace(ROOT, "ROOT")),
    ("listdir a", lambda: sorted(os.listdir(p("a")))),
    ("scandir types", lambda: sorted((e.name, e.is_dir(), e.is_symlink()) for e in os.scandir(p("a")))),
    ("raw getdents64", lambda: raw_getdents("a")),
    ("open missing", lambda: attempt(lambda: open(p("nope")))),
    ("open through a file", lambda: attempt(lambda: open(p("a/hello.txt/x")))),
    ("stat with trailing slash on a file", lambda: attempt(lambda: os.stat(p("a/hello.txt") + "/"))),
    ("listdir of a file", lambda: attempt(lambda: os.listdir(p("a/hello.txt")))),
    ("symlink loop", lambda: attempt(lambda: os.stat(p("loop")))),
    ("spellings //, /./", lambda: attempt(lambda: os.stat(ROOT.replace("/", "//") + "/./a//b/numbers.txt").st_size)),
    ("path of PATH_MAX bytes", lambda: attempt(lambda: os.stat(p("a/" + "x" * 4096)))),
    ("0000 file", lambda: attempt(lambda: open(p("locked/secret")).read())),
    ("0000 dir listed", lambda: attempt(lambda: os.listdir(p("closed")))),
    ("under a 0000 dir", lambda: attempt(lambda: st_fields(os.stat(p("closed/inside"))))),
    ("access R_OK", lambda: os.access(p("a/b/numbers.txt"), os.R_OK)),
    ("access W_OK", lambda: cerr(libc.access(p("a/b/numbers.txt").encode(), 2))),
    ("O_DIRECT read and F_GETFL", lambda: attempt(lambda: getfl(os.O_RDONLY | os.O_DIRECT))),
    ("F_GETFL", lambda: attempt(lambda: getfl(os.O_RDONLY))),
    ("F_GETFL, O_NOATIME asked", lambda: attempt(lambda: getfl(os.O_RDONLY | os.O_NOATIME))),
    ("F_GETFL after F_SETFL O_NOATIME", setfl_noatime),
    ("O_NOATIME", noatime),
    ("SEEK_DATA/SEEK_HOLE, dense file", lambda: f"{seek('a/b/numbers.txt', os.SEEK_DATA, 10)} {seek('a/b/numbers.txt', os.SEEK_HOLE, 0)}"),
    ("SEEK_DATA/SEEK_HOLE, sparse file", sparse_seek),
    ("hard links", hardlinks),
    ("statvfs", statvfs),
    ("pathconf NAME_MAX", lambda: attempt(lambda: os.pathconf(p("a"), "PC_NAME_MAX"))),
    ("listxattr, none", lambda: attempt(lambda: os.listxattr(p("a/b/numbers.txt")))),
    ("getxattr, none", lambda: attempt(lambda: os.getxattr(p("a/b/numbers.txt"), "user.x"))),
    ("listxattr", lambda: attempt(lambda: sorted(os.listxattr(p("a/hello.txt"))))),
    ("getxattr", lambda: attempt(lambda: os.getxattr(p("a/hello.txt"), "user.label"))),
    ("getxattr, empty value", lambda: attempt(lambda: os.getxattr(p("a/hello.txt"), "user.empty"))),
    ("getxattr, size 0 and too small", lambda: getxattr_c("a/hello.txt", "user.label", 0) + " " + getxattr_c("a/hello.txt", "user.label", 2)),
    ("getxattr, another namespace", lambda: attempt(lambda: os.getxattr(p("a/hello.txt"), "trusted.x"))),
    ("getxattr through a symlink, and of it", lambda: getxattr_c("a/link-to-hello", "user.label", 64) + " " + getxattr_c("a/link-to-hello", "user.label", 64, follow=False)),
    ("fgetxattr, flistxattr", lambda: fgetxattr("a/hello.txt", "user.label")),
    ("xattrs of a directory", lambda: attempt(lambda: [(n, os.getxattr(p("a/b"), n)) for n in sorted(os.listxattr(p("a/b")))])),
    ("xattrs of the root", lambda: attempt(lambda: [(n, os.getxattr(ROOT, n)) for n in sorted(os.listxattr(ROOT))])),
    ("xattrs of a hard link", lambda: attempt(lambda: os.getxattr(p("hard/two"), "user.label"))),
    ("setxattr", lambda: attempt(lambda: os.setxattr(p("a/hello.txt"), "user.label", b"changed"))),
    ("removexattr", lambda: attempt(lambda: os.removexattr(p("a/hello.txt"), "user.label"))),
    ("inotify_add_watch", inotify),
    ("nftw", lambda: attempt(nftw_walk)),
    ("glibc fts", lambda: attempt(fts_walk)),
    ("/proc/self/fd name", lambda: attempt(proc_fd_name)),
    ("/proc/thread-self/fd name", lambda: attempt(lambda: proc_fd_name("/proc/thread-self"))),
    # --- changes: each must fail and change nothing
    ("open for write", lambda: attempt(lambda: open(p("a/b/numbers.txt"), "r+"))),
    ("create", lambda: attempt(lambda: open(p("a/new.txt"), "w"))),
    ("mkdir", lambda: attempt(lambda: os.mkdir(p("a/newdir")))),
    ("mkdir existing", lambda: attempt(lambda: os.mkdir(p("a/b")))),
    ("mkdir -p", lambda: sh(["mkdir", "-p", p("a/x/y")])),
    ("unlink", lambda: attempt(lambda: os.unlink(p("a/b/numbers.txt")))),
    ("rmdir", lambda: attempt(lambda: os.rmdir(p("empty")))),
    ("rename", lambda: attempt(lambda: os.rename(p("a/hello.txt"), p("a/h2")))),
    ("chmod", lambda: attempt(lambda: os.chmod(p("a/b/numbers.txt"), 0o600))),
    ("truncate", lambda: attempt(lambda: os.truncate(p("a/b/numbers.txt"), 0))),
    ("utime", lambda: attempt(lambda: os.utime(p("a/empty.txt")))),
    ("utimensat UTIME_OMIT twice", utime_omit),
    ("symlink", lambda: attempt(lambda: os.symlink("x", p("a/newlink")))),
    ("remove() relative", relative_remove),
    ("openat(dirfd) write, create", openat_write),
    ("/proc/self/fd/N reopened for write", proc_fd_reopen_write),
    ("shell redirect in a directory of it", lambda: sh("echo x > numbers.txt", cwd=p("a/b"))),
    ("sed -i", lambda: sh(["sed", "-i", "s/1/2/", p("a/b/numbers.txt")])),
    ("mkstemp", mkstemp_in),
    ("static busybox rm", lambda: sh([BUSYBOX, "rm", "-f", p("a/b/s1.dat")], env=no_preload())),
    ("static busybox write", lambda: sh([BUSYBOX, "sh", "-c", f"echo x >> '{p('a/b/s2.dat')}'"], env=no_preload())),
    # --- what the library does not reach
    ("static busybox cat", lambda: sh([BUSYBOX, "cat", p("a/b/numbers.txt")], env=no_preload())),
    ("static busybox ls -lan", lambda: sh(f"{BUSYBOX} ls -lan '{p('a')}' | awk '{{print $1, $3, $4, $NF}}'", env=no_preload())),
    ("static busybox find", lambda: sh(f"{BUSYBOX} find '{ROOT}' | sort", env=no_preload())),
    ("exec a script", lambda: sh([p("bin/hello.sh"), "arg"])),
    ("exec a script, no library", lambda: sh([p("bin/hello.sh"), "arg"], env=no_preload())),
    ("raw statx (as node's fs.statSync)", lambda: raw_statx("a/b/numbers.txt")),
    ("dlopen from it", lambda: attempt(lambda: ctypes.CDLL(p("lib/libfsdemo.so")).fsdemo_answer())),
    ("Python C extension import", lambda: sh([sys.executable, "-c", "import fsext; print(fsext.origin)"],
                                             env=dict(os.environ, PYTHONPATH=p("pkg")))),
    ("LD_LIBRARY_PATH search", lambda: sh([sys.executable, "-c", "import ctypes; print(ctypes.CDLL('libfsdemo.so').fsdemo_answer())"],
                                           env=dict(os.environ, LD_LIBRARY_PATH=p("lib")))),
    ("ls of the parent", lambda: attempt(lambda: os.path.basename(ROOT) in os.listdir(os.path.dirname(ROOT)))),
    ("df", lambda: sh(f"df -P '{ROOT}' >/dev/null")),
    # --- and afterwards, nothing changed
    ("contents after", contents),
    ("tree after", tree),
]

for name, fn in CASES:
    try:
        r = fn()
    except OSError as e:
        r = err(e)
    except Exception as e:  # a case that breaks is a result too, and must match
        r = f"{type(e).__name__}"
    print(f"{name}: " + str(r).replace("\n", " | "), flush=True)
