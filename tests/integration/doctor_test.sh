#!/usr/bin/env bash
# `fanstore doctor` against real setups in a temporary directory: a good one, a plugstack.conf
# without the plugin line, a line naming a missing .so, bad arguments, a full, a read-only and a
# missing local directory, and MUNGE as it really is. Usage: doctor_test.sh BUILD_DIR
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
B=$(cd "$1" && pwd)
F="$B/bin/fanstore"
SO="$B/lib/spank_fanstore.so"
T=$(mktmp)
MOUNTS=()
cleanup() {
  local m
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
cd "$T" || exit 1

# With the build's agent and preload library, so that only what a case breaks is wrong.
PROGS="agent=$B/bin/fanstore-agent preload=$B/lib/libfanstore_preload.so"
mkdir local prefix
# conf NAME LINE...: a plugstack.conf with these lines.
conf() {
  local name=$1; shift
  mkdir -p "$(dirname "$name")"
  printf '%s\n' "# a comment naming spank_fanstore.so does not count" "$@" > "$name"
}
# doctor ARGS...: runs it, output in $out, exit status in $rc.
doctor() { out=$("$F" doctor "$@" 2>&1); rc=$?; }
# has PATTERN: the output has a line matching PATTERN (an extended regex).
has() { grep -qE -- "$1" <<<"$out" || { echo "    output was:"; indent "      " <<<"$out"; false; }; }
# lacks PATTERN: no line matches.
lacks() { ! grep -qE -- "$1" <<<"$out"; }

if [[ $EUID -eq 0 ]]; then ensure_munge; fi
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then munge_works=1; else munge_works=0; fi

echo "== a good setup"
conf good.conf "required $SO $PROGS local_dir=$T/local stagein_timeout=600 mount_prefix=$T/prefix"
doctor --plugstack good.conf
if [[ $munge_works -eq 1 ]]; then
  check "exit 0" test "$rc" -eq 0
else
  check "exit 1 (munged does not work here)" test "$rc" -eq 1
fi
check "the plugin line is ok and names the .so" has "^ok +plugin +$SO \(plugin 'fanstore', built for Slurm [0-9.]+\) is named at good.conf:2$"
check "its arguments parse" has "^ok +plugin-args +arguments parse; agent $B/bin/fanstore-agent"
check "the local directory comes from local_dir=" has "^ok +local-dir +the local directory $T/local is writable"
check "free space and inodes are printed" has "^(ok|warn) +local-space +$T/local has [0-9.]+ [KMGT]?i?B free and [0-9]+ free inodes"
check "the local file system is named node-local" has "^ok +local-fs +$T/local is on a node-local file system"
if [[ $(stat -f -c %T "$T/local") == tmpfs ]]; then
  check "the read path on tmpfs: files, no image" has "^ok +read-path +jobs keep a file per dataset file in $T/local \(tmpfs.*no EROFS image"
elif [[ $EUID -eq 0 ]]; then
  # A real mount of a one-file image, as the plugin's mount service makes it (image/mount.h), in
  # a child's own mount namespace; a kernel without file-backed EROFS is a warning that says so.
  check "the read path on disk, as root: an EROFS image probed, or the kernel's refusal" \
    has "^(ok +read-path +jobs keep their share in $T/local as an EROFS image, mounted by the plugin's mount service.*\(Linux [^)]+\): probed, it mounts from a file and reads back|warn +read-path +.*the kernel refused an EROFS image)"
  check "the probe leaves nothing in the local directory" test -z "$(ls -A "$T/local")"
  conf noimage.conf "required $SO $PROGS local_dir=$T/local image=no"
  doctor --plugstack noimage.conf
  check "image=no: files, and why" has "^ok +read-path +jobs keep a file per dataset file in $T/local \(image=no"
  doctor --plugstack good.conf  # the checks below read the good setup's output
else
  check "the read path on disk, as a user: an image where the kernel allows, probed as root" has "^ok +read-path +.*as an EROFS image where the kernel mounts one from a file"
fi
check "PMIx is the agent's" has "^ok +pmix +.*PMIx.*\(the agent was built against PMIx [0-9]"
check "open files are reported" has "^(ok|warn) +nofile +open files: soft [0-9a-z]+, hard [0-9a-z]+"
check "memlock is reported" has "^ok +memlock +locked memory: soft"
check "/dev/fuse is a warning at most, saying what it is for" \
  has "^(ok +fuse +/dev/fuse exists and is usable by users|warn +fuse +.*(tasks get no kernel-visible view|kernel-view. without root))"
check "the empty mount_prefix= is the view's mount point" \
  has "^ok +mount-prefix +$T/prefix is an empty directory: each task's view is mounted under it"
touch prefix/planted
doctor --plugstack good.conf
check "a mount_prefix= that holds something: a warning naming it and the loss" \
  has "^warn +mount-prefix +$T/prefix is not empty: tasks get no kernel-visible view .*Fix: point mount_prefix= at an empty directory"
rm prefix/planted
conf noview.conf "required $SO $PROGS local_dir=$T/local mount_prefix=$T/missing kernel_view=no"
doctor --plugstack noview.conf
view_off() { has '^ok +fuse +the kernel-visible view is turned off' && lacks mount-prefix; }
check "kernel_view=no: the view's checks say it is off" view_off
check "namespaces are a warning at most" has "^(ok|warn) +userns "
check "no FAIL line but munge's" lacks "^FAIL +([^m]|m[^u])"
if [[ -x /usr/bin/srun ]]; then
  if /usr/bin/srun --mpi=list 2>&1 | grep -q pmix; then
    check "Slurm's pmix plugin is found" has "^ok +slurm-mpi +Slurm's MPI plugins include pmix"
  else
    check "Slurm without pmix FAILs" has "^FAIL +slurm-mpi +Slurm has no pmix MPI plugin"
  fi
else
  check "no srun is a warning" has "^warn +slurm-mpi +srun is not at"
fi

echo "== MUNGE as it is"
if [[ $munge_works -eq 1 ]]; then
  check "munge is ok (munge -n | unmunge works)" has "^ok +munge +munged at .* encodes and decodes a credential"
else
  check "munge FAILs (munge -n | unmunge fails)" has "^FAIL +munge +.*munge"
fi
doctor --plugstack good.conf --munge-socket "$T/no-munge.socket"
check "no munged at the socket: FAIL, exit 1" test "$rc" -eq 1
check "it says munged is not running and how to start it" has "^FAIL +munge +munged is not running \(no socket at $T/no-munge.socket\)\. Fix: start it: systemctl start munge$"

echo "== plugstack.conf without the plugin line"
conf noline.conf "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/other.so"
doctor --plugstack noline.conf
check "exit 1" test "$rc" -eq 1
check "FAIL names the missing plugin and the line to add" has "^FAIL +plugin +no line of noline.conf \(or the files it includes\) names spank_fanstore.so.*Fix: add the line 'required /.*/spank_fanstore.so' to noline.conf"
doctor --plugstack "$T/missing.conf"
check "a missing plugstack.conf FAILs" has "^FAIL +plugin +$T/missing.conf does not exist"

echo "== includes"
conf inc/plugstack.conf "include $T/inc/plugstack.conf.d/*.conf"
conf inc/plugstack.conf.d/fanstore.conf "required $SO $PROGS local_dir=$T/local"
doctor --plugstack inc/plugstack.conf
check "the line in an included file is found" has "^ok +plugin +$SO .* is named at $T/inc/plugstack.conf.d/fanstore.conf:2$"
conf inc/plugstack.conf "# nothing included"
doctor --plugstack inc/plugstack.conf
check "a snippet that is not included FAILs, saying what to include" has "^FAIL +plugin +inc/plugstack.conf.d/fanstore.conf:2 names spank_fanstore.so but inc/plugstack.conf does not include it\. Fix: add the line 'include inc/plugstack.conf.d/\*.conf'"

echo "== a line naming a missing .so"
conf missing-so.conf "required $T/nowhere/spank_fanstore.so $PROGS local_dir=$T/local"
doctor --plugstack missing-so.conf
check "exit 1" test "$rc" -eq 1
check "FAIL names the missing file" has "^FAIL +plugin +missing-so.conf:2 names $T/nowhere/spank_fanstore.so, which does not exist"
printf 'not a library\n' > fake
mkdir -p fakedir && cp fake fakedir/spank_fanstore.so
conf not-elf.conf "required $T/fakedir/spank_fanstore.so $PROGS local_dir=$T/local"
doctor --plugstack not-elf.conf
check "a file that is not ELF FAILs" has "^FAIL +plugin +$T/fakedir/spank_fanstore.so is not a shared library"

echo "== plugin arguments"
conf badarg.conf "required $SO $PROGS local_dir=$T/local stage_timeout=5"
doctor --plugstack badarg.conf
check "an unknown key FAILs, exit 1" test "$rc" -eq 1
check "it names the key and the known ones" has "^FAIL +plugin-args +badarg.conf:2: unknown key 'stage_timeout' \(known keys: agent,"
conf noagent.conf "required $SO agent=$T/no-agent preload=$B/lib/libfanstore_preload.so local_dir=$T/local"
doctor --plugstack noagent.conf
check "a missing agent FAILs, naming it" has "^FAIL +plugin-args +the plugin's programs are missing on this node: agent=$T/no-agent\."
conf optional.conf "optional $SO $PROGS local_dir=$T/local"
doctor --plugstack optional.conf
check "an optional plugin is a warning" has "^warn +plugin +.*as optional.*Fix: write 'required'"

echo "== the local directory"
doctor --plugstack good.conf --local-dir "$T/absent"
check "a missing local directory FAILs, exit 1" test "$rc" -eq 1
check "it says to create it" has "^FAIL +local-dir +the local directory $T/absent does not exist.*Fix: create it on every node: mkdir -p $T/absent"
mkdir -p "local/$(id -un)"
doctor --plugstack good.conf --local-dir "$T/local/%u/%j"
check "%u is the user; the job's part is left out" has "^ok +local-dir +the local directory $T/local/$(id -un) \(from $T/local/%u/%j\) is writable \(each job's"
# %n is the node's name as the plugin takes it: slurmd's SLURMD_NODENAME, which need not be the
# host name, else the host name up to its first dot.
mkdir -p local/fs-node-7
SLURMD_NODENAME=fs-node-7 doctor --plugstack good.conf --local-dir "$T/local/%n/%j"
check "%n is SLURMD_NODENAME where slurmd sets it" has "^ok +local-dir +the local directory $T/local/fs-node-7 \(from $T/local/%n/%j\) is writable"
host=$(hostname)
host=${host%%.*}
mkdir -p "local/$host"
out=$(env -u SLURMD_NODENAME "$F" doctor --plugstack good.conf --local-dir "$T/local/%n" 2>&1)
check "%n is the short host name without it" has "^ok +local-dir +the local directory $T/local/$host \(from $T/local/%n\) is writable"
SLURMD_NODENAME=.. doctor --plugstack good.conf --local-dir "$T/local/%n"
check "a node name the plugin refuses FAILs" has "^FAIL +local-dir +unusable node name '\.\.': the plugin fails every job on this node"
if [[ $EUID -eq 0 ]]; then
  mkdir full ro
  mount -t tmpfs -o size=1M tmpfs full && MOUNTS+=("$T/full")
  head -c 2M /dev/zero > full/fill 2>/dev/null
  doctor --plugstack good.conf --local-dir "$T/full"
  check "a full local directory: exit 1" test "$rc" -eq 1
  check "it FAILs on free space, naming the directory" has "^FAIL +local-space +$T/full has 0 B free and [0-9]+ free inodes: it is full.*Fix: free space in $T/full"
  mount -t tmpfs -o ro,size=1M tmpfs ro && MOUNTS+=("$T/ro")
  doctor --plugstack good.conf --local-dir "$T/ro"
  check "a read-only local directory FAILs, exit 1" test "$rc" -eq 1
  check "it says it cannot write there" has "^FAIL +local-dir +cannot create a file in the local directory $T/ro: Read-only file system\. Fix: mount it read-write"
  check "a tmpfs says it uses memory" has "^ok +local-fs +$T/ro is on a node-local file system \(tmpfs"
  mkdir users && chown nobody users && chmod 0755 users
  doctor --plugstack good.conf --local-dir "$T/users"
  check "a user's directory others cannot write to is a warning (run as root)" has "^warn +local-dir +the local directory $T/users belongs to uid [0-9]+ and others cannot write to it.*Fix: chown root $T/users, or chmod 1777"
else
  echo "  (not root: the full and read-only tmpfs cases are skipped)"
  mkdir ro && chmod 0555 ro
  doctor --plugstack good.conf --local-dir "$T/ro"
  check "an unwritable local directory FAILs, exit 1" test "$rc" -eq 1
  check "it says it cannot write there" has "^FAIL +local-dir +cannot create a file in the local directory $T/ro: Permission denied"
fi

echo "== --json and --quiet"
text=$("$F" doctor --plugstack good.conf)
json=$("$F" doctor --plugstack good.conf --json)
check "--json parses, one record per check of the text output" /usr/bin/python3 -c '
import json, sys
records = json.loads(sys.argv[1])
lines = sys.argv[2].splitlines()
assert isinstance(records, list) and len(records) == len(lines), (len(records), len(lines))
for r, line in zip(records, lines):
    assert r["status"] in ("ok", "warn", "FAIL"), r
    assert line.split()[:2] == [r["status"], r["check"]], (line, r)
    assert r["detail"] and (r["status"] == "ok") == ("fix" not in r), r
names = [r["check"] for r in records]
for want in ("plugin", "plugin-args", "munge", "pmix", "local-dir", "local-space", "fuse", "userns",
             "nofile", "memlock"):
    assert want in names, want
' "$json" "$text"
doctor --plugstack noline.conf --quiet
check "--quiet keeps the exit status" test "$rc" -eq 1
check "--quiet prints the FAIL" has "^FAIL +plugin "
check "--quiet prints no ok line" lacks "^ok"
check "fanstore --help lists doctor" bash -c "'$F' --help | grep -qE '^  doctor +check that this node'"
expect_fail "a bad option is a usage error" 2 "--bogus" "$F" doctor --bogus

finish
