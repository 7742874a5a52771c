# Shared by the end-to-end tests of FanStore on a real Slurm cluster (tests/slurm/cluster.sh): one
# script per case here, each run by ctest with the label `slurm` (see ../CMakeLists.txt). A case
# script sources this file first, with its own arguments: BUILD_DIR [...]. Run as root: start.sh
# starts the cluster; every job runs as the test user fsalice, with datasets that fsalice packed.
#
# The cluster runs FanStore's installed Debian packages: start.sh builds them from BUILD_DIR (cpack)
# and installs them (dpkg -i), stop.sh purges them; the cases run the installed commands ($FS_BIN).
# Exit status 77 (ctest: skipped) when not root.
# shellcheck shell=bash
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
set -uo pipefail

E2E=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HERE=$(dirname "$E2E")     # tests/slurm
# The usage: the case script's header comment.
[[ $# -ge 1 ]] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | grep -v '^# shellcheck'; exit 2; }
# shellcheck disable=SC2034  # BUILD is for the case scripts.
BUILD=$(realpath "$1")
CASE=$(basename "$0" .sh)
TEST_NAME=slurm_$CASE
# shellcheck source=../../lib.sh
source "$HERE/../lib.sh"

CLUSTER=$HERE/cluster.sh
BASE=$(realpath -m "${FANSTORE_SLURM_BASE:-/var/tmp/fanstore-slurm}")
FS_BIN=/usr/bin        # the installed fanstore and fanstore-agent (package fanstore)
# shellcheck disable=SC2034  # SCRIPTS and PKG_DIR are for the case and fixture scripts.
SCRIPTS=$BASE/scripts  # the Python job scripts of tests/slurm, where the test user can use them
# shellcheck disable=SC2034
PKG_DIR=$BASE/pkg      # start.sh's packages, dpkg's log, and what it installed (for stop.sh)
PFS=$BASE/pfs          # datasets, as on a parallel file system; survives cluster restarts
TUSER=fsalice
PY=/usr/bin/python3
JOB_TIMEOUT=${FANSTORE_TEST_JOB_TIMEOUT:-180}

[[ $(id -u) -eq 0 ]] || { echo "$TEST_NAME: skipped: must run as root (it drives a Slurm cluster)"; exit 77; }

say() { echo "$TEST_NAME: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# A Slurm client command as the test user, with a clean environment, in the cluster's namespace.
asu() {
  "$CLUSTER" exec --base "$BASE" --user "$TUSER" -- \
    env -i HOME="/home/$TUSER" USER="$TUSER" LOGNAME="$TUSER" PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"
}
# The same as root (squeue, scancel, scontrol).
asroot() { "$CLUSTER" exec --base "$BASE" -- "$@"; }
uid_of() { id -u "$TUSER"; }

# A directory for one case's job files, owned by the test user.
job_dir() {
  local d=$BASE/jobs/$CASE
  rm -rf "$d"
  mkdir -p "$d"
  chown "$TUSER:" "$d"
  echo "$d"
}

# wait_job JOBID: prints the final state (polls squeue; sbatch --wait polls every 10 s).
wait_job() {
  local j=$1 st="" deadline=$((SECONDS + JOB_TIMEOUT))
  while ((SECONDS < deadline)); do
    st=$(asroot squeue -h -t all -j "$j" -o %T 2>/dev/null || true)
    case $st in
      COMPLETED | FAILED | CANCELLED* | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        echo "$st"
        return 0
        ;;
    esac
    sleep 0.2
  done
  echo "NOT_DONE(${st:-unknown})"
}

# fence_race J: whether a node's slurmstepd of job J refused its ring neighbour's PMIx connection on
# Slurm's MUNGE race: it runs with the job user's uid while it launches tasks, and a credential made
# for root does not decode then; the fence stops there (docs/admin.md). Slurm's, not FanStore's.
fence_race() {
  grep -qs "\] \[$1\.[0-9]*\] error: Munge decode failed: Unauthorized credential" "$BASE"/log/slurmd.*.log
}

# job_start J: when slurmctld started job J (its log's timestamp), whichever scheduler started it:
# the main one ("sched: Allocate JobId=J ...") or the backfill one ("Started JobId=J in ...").
job_start() {
  sed -n -e "s/^\[\([^]]*\)\] sched: Allocate JobId=$1 .*/\1/p" \
    -e "s/^\[\([^]]*\)\] .*Started JobId=$1 in .*/\1/p" "$BASE/log/slurmctld.log" | head -1
}

# sbatch_job DIR SBATCH_ARGS...: submits as the test user from DIR (--parsable added) and waits;
# sets JOB and JOB_STATE (empty JOB: sbatch failed, JOB_STATE its message). A job that stopped on
# Slurm's fence race (fence_race) is checked for leftovers and submitted once more, saying so.
sbatch_job() {
  local dir=$1 attempt
  shift
  for attempt in 1 2; do
    JOB=$(cd "$dir" && asu sbatch --parsable "$@" 2>&1) || { JOB_STATE="sbatch: $JOB"; JOB=""; return 1; }
    JOB_STATE=$(wait_job "$JOB")
    if [[ $JOB_STATE != COMPLETED ]]; then  # what the step daemons said of it, for the record
      echo "----- slurmd's errors for job $JOB (the first 20)"
      grep -hs "\] \[$JOB\.[0-9]*\] error" "$BASE"/log/slurmd.*.log | head -20 | sed 's/^/  | /'
    fi
    [[ $JOB_STATE != COMPLETED && $attempt == 1 ]] && fence_race "$JOB" || return 0
    say "job $JOB ($JOB_STATE) stopped in Slurm's PMIx fence on its MUNGE race (a node's" \
      "slurmstepd refused its neighbour's connection while launching; docs/admin.md): submitting it once more"
    check_clean "$JOB"
  done
}

# pack_dataset SRC DST.fs [pack options]: as the test user; skipped when DST.fs exists already and this
# build's fanstore reads it (an older format version is packed again).
pack_dataset() {
  local src=$1 dst=$2
  shift 2
  if [[ -f $dst/manifest.json ]]; then
    asu "$FS_BIN/fanstore" info "$dst" >/dev/null 2>&1 && return 0
    rm -rf "$dst"
  fi
  asu "$FS_BIN/fanstore" pack "$src" "$dst" --no-sync -q "$@"
}

# Everything of job J that could remain on any node: live processes of the test user carrying the job's
# id, run directories and launch files in /dev/shm, node-local directories, sockets of the test user
# there.
leftovers() {
  local j=$1 uid p st
  uid=$(uid_of)
  # The test user's processes, found in one go (a stat per process costs a second per check).
  while read -r p; do
    st=$(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f1)
    [[ -z $st || $st == Z || $st == X ]] && continue
    if tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_JOB_ID=$j"; then
      echo "process ${p#/proc/}: $(tr '\0' ' ' 2>/dev/null <"$p/cmdline" | cut -c1-120)"
    fi
  done < <(find /proc -mindepth 1 -maxdepth 1 -regex '/proc/[0-9]+' -uid "$uid" 2>/dev/null)
  find /dev/shm -maxdepth 1 -name "fanstore.$uid.$j*" -user "$TUSER" -printf 'shm %p\n' 2>/dev/null
  find "/dev/shm/fanstore.$uid" -maxdepth 1 -name "$j.launch*" -printf 'shm %p\n' 2>/dev/null
  find "$BASE"/nodes/*/local -maxdepth 1 \( -name "fanstore.$uid.$j" -o -name "fanstore.$uid.$j.output" \) -user "$TUSER" -printf 'local %p\n' 2>/dev/null
  # The agents' images (issue 31), and their mount services (root's processes).
  grep -F "/fanstore.$uid.$j/" /proc/self/mountinfo 2>/dev/null | awk '{ print "mount " $5 " (" $9 ")" }'
  for p in $(pgrep -x fanstore-mount); do
    tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "SLURM_JOB_ID=$j" && echo "process $p: fanstore-mount"
  done
  # -xdev and a timeout: other mounts (a hung FUSE mount in /tmp, say) must not stall the check.
  timeout 20 find /dev/shm "$BASE/nodes" -xdev -user "$TUSER" -type s -path "*fanstore.$uid.$j*" -printf 'socket %p\n' 2>/dev/null
}

# check_clean J: waits (bounded) for the job's epilogs and the agents' exit, then requires no leftovers.
check_clean() {
  local j=$1 deadline=$((SECONDS + 40)) left st
  while ((SECONDS < deadline)); do
    st=$(asroot squeue -h -t all -j "$j" -o %T 2>/dev/null || true)
    if [[ $st != COMPLETING && $st != RUNNING ]]; then
      left=$(leftovers "$j")
      [[ -z $left ]] && { ok "job $j left nothing on any node (no process, /dev/shm entry, local dir, mount or socket)"; return 0; }
    fi
    sleep 0.5
  done
  bad "job $j left things behind:"$'\n'"$(leftovers "$j")"
}

# job_output FILE: prints it indented.
job_output() {
  echo "----- $1"
  sed 's/^/  | /' "$1" 2>/dev/null
  echo "-----"
}

# need_cluster MODE: the cluster the case needs is up; else the case fails at once.
need_cluster() {
  [[ $("$CLUSTER" env --base "$BASE" 2>/dev/null | sed -n 's/^MODE=//p') == "$1" ]] \
    || { bad "no $1 cluster running (run start.sh BUILD_DIR $1 first)"; finish; exit 1; }
}

# ------------------------------------------------------------------------------------------ datasets
# md5 tree: the awkward tree of tests/lib.sh plus a 2 MiB file, packed in several shards.
md5_dataset() {
  local src=$PFS/tree DS=$PFS/tree.fs
  if [[ ! -d $src ]]; then
    make_tree "$src" 2
    chown -R -h "$TUSER:" "$src"
  fi
  pack_dataset "$src" "$DS" --shard-size 256K || bad "pack $src"
  echo "$DS"
}

# many: 200 files (120 incompressible of 16-20 KB, 80 compressible texts, 7 MB), packed in 28 shards of
# 256 KiB, so that with one copy of each shard two nodes hold about half of them each.
many_dataset() {
  local src=$PFS/many ds=$PFS/many.fs i
  if [[ $(find "$src" -type f 2>/dev/null | wc -l) != 200 ]]; then
    rm -rf "$src" "$ds"
    mkdir -p "$src/x" "$src/y"
    for i in $(seq 1 120); do head -c $((16000 + i * 37)) /dev/urandom >"$src/x/f$i.bin"; done
    for i in $(seq 1 80); do seq $((i * 300)) >"$src/y/t$i.txt"; done
    chown -R "$TUSER:" "$src"
  fi
  pack_dataset "$src" "$ds" --shard-size 256K || bad "pack $src"
  echo "$ds"
}

# expected_md5 DIR: "md5  ./path" of every file under DIR, sorted, as the job scripts list them.
expected_md5() { (cd "$1" && find . -type f | LC_ALL=C sort | while read -r f; do md5sum "$f"; done); }

# fstool placement DS SRC NODES R: one JSON line per rank, as the agents place shards (round robin:
# shard s on ranks s..s+R-1 mod NODES, as agent/placement.cc): {"rank", "shards", "raw" bytes of their files,
# "pages" (the same in 4 KiB pages, as a tmpfs counts them), "source_bytes" (their shard files), "files":
# [{"path", "shard", "file", "offset", "stored", "codec", "size"}]}; then {"nshards", "min_shard_raw",
# "total_source"}.
fstool() {
  "$PY" - "$FS_BIN/fanstore" "$@" <<'PY'
import json, os, subprocess, sys
fanstore, cmd, ds, src, size, r = sys.argv[1:7]
size, r = int(size), int(r)
holders = lambda s: [(s + k) % size for k in range(max(1, min(r, size)))]
files = []
for line in subprocess.run([fanstore, "ls", "-w", ds], capture_output=True, text=True, check=True).stdout.splitlines():
    p = line.rsplit(" ", 4)
    if len(p) == 5 and p[1].startswith("shard-"):
        files.append(dict(path=p[0], shard=int(p[1][6:11]), file=p[1], offset=int(p[2]), stored=int(p[3]), codec=p[4],
                          size=os.lstat(os.path.join(src, p[0])).st_size))
shards = json.load(open(os.path.join(ds, "manifest.json")))["shards"]
nshards = len(shards)
sbytes = lambda s: os.path.getsize(os.path.join(ds, "shard-%05d.fsd" % s))
place = {s: holders(s) for s in range(nshards)}
for k in range(size):
    mine = [s for s in range(nshards) if k in place[s]]
    fl = [f for f in files if f["shard"] in mine]
    print(json.dumps(dict(rank=k, shards=mine, raw=sum(f["size"] for f in fl),
                          pages=sum((f["size"] + 4095) // 4096 * 4096 for f in fl),
                          source_bytes=sum(sbytes(s) for s in mine), files=fl)))
print(json.dumps(dict(nshards=nshards, min_shard_raw=min(sum(f["size"] for f in files if f["shard"] == s) for s in range(nshards)),
                      total_source=sum(sbytes(s) for s in range(nshards)))))
PY
}

# jget JSON EXPR: a value out of a JSON document, e.g. jget "$stats" "['opens']['remote']".
jget() { "$PY" -c "import json, sys; d = json.loads(sys.argv[1]); print(eval('d' + sys.argv[2]))" "$1" "$2"; }

run_dir_of() { echo "/dev/shm/fanstore.$(uid_of).$1.$2"; }  # run_dir_of JOB NODE
status_of() { cat "$(run_dir_of "$1" "$2")/status.json" 2>/dev/null; }
# agent_stats JOB NODE: the agent's JSON counters, asked over its socket (op kStats) as the job user.
agent_stats() {
  runuser -u "$TUSER" -- "$PY" - "$(run_dir_of "$1" "$2")/agent.sock" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(struct.pack('<IIiI', 0x46534c31, 3, 0, 0))
h = b''
while len(h) < 16:
    c = s.recv(16 - len(h))
    if not c: raise SystemExit("agent closed the socket")
    h += c
m, o, st, n = struct.unpack('<IIiI', h)
d = b''
while len(d) < n:
    c = s.recv(n - len(d))
    if not c: break
    d += c
print(d.decode())
PY
}

# wait_for JOB FILE [SEC]: until the job's script creates FILE; fails at once when the job ended.
wait_for() {
  local j=$1 f=$2 deadline=$((SECONDS + ${3:-60})) st
  while ((SECONDS < deadline)); do
    [[ -e $f ]] && return 0
    st=$(asroot squeue -h -t all -j "$j" -o %T 2>/dev/null)
    [[ $st == PENDING || $st == CONFIGURING || $st == RUNNING ]] || { [[ -e $f ]]; return; }
    sleep 0.1
  done
  return 1
}

# wait_ready JOB NODE: until that node's agent says ready (20 s at most).
wait_ready() {
  local i
  for ((i = 0; i < 200; i++)); do
    [[ $(status_of "$1" "$2") == *'"state":"ready"'* ]] && return 0
    sleep 0.1
  done
  return 1
}

# Runs a command in the mount namespace of NODE's slurmd (netns mode), or here (ports mode).
in_node_ns() {
  local node=$1
  shift
  if [[ $("$CLUSTER" env --base "$BASE" | sed -n 's/^MODE=//p') == netns ]]; then
    nsenter -t "$(cat "$BASE/state/slurmd.$node.pid")" -m -- "$@"
  else
    "$@"
  fi
}
node_local() { [[ $("$CLUSTER" env --base "$BASE" | sed -n 's/^MODE=//p') == netns ]] && echo "$BASE/local" || echo "$BASE/nodes/$1/local"; }

# small_local NODE BYTES: gives NODE a node-local directory of BYTES (a tmpfs over its own). Sized for the
# node's share plus a little, it leaves the agent a tiny cache (half of what is free after the stage-in):
# no shard fits, so nothing is prefetched, and a file held elsewhere is fetched only when it is opened.
# (The plugin passes no --cache-size or --no-prefetch to the agents, so this is the only way to get
# there through Slurm.)
small_local() {
  local node=$1 bytes=$2 dir
  dir=$(node_local "$node")
  in_node_ns "$node" mount -t tmpfs -o "size=$bytes,mode=1777" fanstore-e2e "$dir" || return 1
  # shellcheck disable=SC2016  # $1 and $2 are the inner sh's arguments.
  in_node_ns "$node" sh -c 'echo "$1" >"$2/.node-name" && chmod 0644 "$2/.node-name"' sh "$node" "$dir"
}
# restore_local NODE: checks that the job left nothing in the small directory, then removes it.
restore_local() {
  local node=$1 dir left
  dir=$(node_local "$node")
  left=$(in_node_ns "$node" find "$dir" -mindepth 1 ! -name .node-name)
  [[ -z $left ]] && ok "$node: the small node-local directory is empty again" || bad "$node: left in $dir: $left"
  in_node_ns "$node" umount "$dir" || bad "umount $dir on $node"
}

# The agents' output (their launch log) while the job runs; the epilog removes it at the end.
launch_log() { cat "/dev/shm/fanstore.$(uid_of)/$1.launch.log" 2>/dev/null; }

# The node-local directory for node1 in the cases that use small_local: its share plus 256 KiB. The agent's cache is then
# about 120 KiB, smaller than any shard (at least 250 KiB): nothing is prefetched.
# small_node1 PLACEMENT_FILE
small_node1() {
  local pages
  pages=$(jget "$(sed -n 1p "$1")" "['pages']")
  small_local node1 $((pages + 262144))
}

# files_of PLACEMENT_FILE RANK: the paths ("./x/f1.bin") of the files that rank holds.
files_of() {
  "$PY" -c "import json, sys; [print('./' + f['path']) for f in json.loads(sys.stdin.readline())['files']]" \
    < <(sed -n "$(($2 + 1))p" "$1")
}

# md5_lines_of PATHS EXPECTED: the lines of EXPECTED (md5 and path) for the paths listed in PATHS.
md5_lines_of() { awk 'NR == FNR { want[$0]; next } $2 in want' "$1" "$2"; }

# wait_job_script JD: a batch script that creates JD/started, then waits for JD/go.
wait_job_script() {
  printf '#!/bin/bash\ntouch %s/started\nwhile [ ! -e %s/go ]; do sleep 0.1; done\n' "$1" "$1" >"$1/job.sh"
  chmod 0755 "$1/job.sh"
}

# must_not_run_script JD: a batch script that must never run (the job fails or ends before it).
must_not_run_script() {
  printf '#!/bin/bash\necho "the batch script must not run"\n' >"$1/job.sh"
  chmod 0755 "$1/job.sh"
}
