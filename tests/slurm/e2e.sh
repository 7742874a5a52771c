#!/usr/bin/env bash
# End-to-end tests of FanStore on a real Slurm cluster (tests/slurm/cluster.sh), run by ctest with the
# label `slurm` (see CMakeLists.txt here). Run as root: it starts the cluster; every job runs as the test
# user fsalice, with datasets that fsalice packed.
#
# Usage: e2e.sh BUILD_DIR CASE
#   start-ports | start-netns   start a 2-node ports / 4-node netns cluster with the plugin from BUILD_DIR
#   stop                        stop it and check that no job left anything behind
#   md5      2-node sbatch --fanstore: tasks on both nodes md5sum every file under the mount (and J1)
#   torch    srun: torchvision ImageFolder + DataLoader(num_workers=2) epoch, same result as on the source
#   reject   bad --fanstore values are refused at submission, naming the path; nothing is queued
#   scancel  scancel during stage-in (384 MiB, or 1152 MiB if that was too fast): every node is clean
#   agentfail  a corrupt shard: the job fails before its script runs, with the agent's message
#   crash    an agent killed with SIGKILL mid-job: the epilog still leaves every node clean
#   direct   srun --fanstore from a login shell, and salloc --fanstore followed by two sruns
#   netns4   4-node netns cluster: distinct hostnames and node-local directories, md5 on every node
#   split    --fanstore-replicas=1 on 2 nodes: each stages only its shards; md5 of every file on both
#   peerkill one agent killed with SIGKILL from the job script: the other node still reads every file
#   corrupt  a frame damaged on the dataset, its holder's agent dead: EIO on the other node, never bytes
#   auth     the second test user gets nothing from an agent's peer port with their own MUNGE credential
#   linkdown (netns) one node's link down mid-job: the other reads every file, in bounded time
#
# The agent and the interception library default to BUILD_DIR/bin/fanstore-agent and
# BUILD_DIR/lib/libfanstore_preload.so; FANSTORE_TEST_AGENT / FANSTORE_TEST_PRELOAD override them.
# Exit status 77 (ctest: skipped) when not root.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -eq 2 ]] || { sed -n '2,25p' "$0"; exit 2; }
BUILD=$(realpath "$1")
CASE=$2
TEST_NAME=slurm_$CASE
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

CLUSTER=$HERE/cluster.sh
BASE=$(realpath -m "${FANSTORE_SLURM_BASE:-/var/tmp/fanstore-slurm}")
OPT=$BASE/opt          # the build's artefacts, installed where the test user can use them
PFS=$BASE/pfs          # datasets, as on a parallel file system; survives cluster restarts
TUSER=fsalice
PY=/usr/bin/python3
JOB_TIMEOUT=${FANSTORE_TEST_JOB_TIMEOUT:-180}
STAGEIN_TIMEOUT=120

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

# pack_dataset SRC DST.fs [pack options]: as the test user; skipped when DST.fs exists already and this
# build's fanstore reads it (an older format version is packed again).
pack_dataset() {
  local src=$1 dst=$2
  shift 2
  if [[ -f $dst/manifest.json ]]; then
    asu "$OPT/bin/fanstore" info "$dst" >/dev/null 2>&1 && return 0
    rm -rf "$dst"
  fi
  asu "$OPT/bin/fanstore" pack "$src" "$dst" --no-sync -q "$@"
}

# Everything of job J that could remain on any node: live processes of the test user carrying the job's
# id, run directories and launch files in /dev/shm, node-local directories, sockets of the test user
# there.
leftovers() {
  local j=$1 uid p st
  uid=$(uid_of)
  # The test user's processes, found in one go (a stat per process costs a second per check).
  for p in $(find /proc -mindepth 1 -maxdepth 1 -regex '/proc/[0-9]+' -uid "$uid" 2>/dev/null); do
    st=$(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f1)
    [[ -z $st || $st == Z || $st == X ]] && continue
    if tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$j"; then
      echo "process ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-120)"
    fi
  done
  find /dev/shm -maxdepth 1 -name "fanstore.$uid.$j*" -user "$TUSER" -printf 'shm %p\n' 2>/dev/null
  find "/dev/shm/fanstore.$uid" -maxdepth 1 -name "$j.launch*" -printf 'shm %p\n' 2>/dev/null
  find "$BASE"/nodes/*/local -maxdepth 1 -name "fanstore.$uid.$j" -user "$TUSER" -printf 'local %p\n' 2>/dev/null
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
      [[ -z $left ]] && { ok "job $j left nothing on any node (no process, /dev/shm entry, local dir or socket)"; return 0; }
    fi
    sleep 0.5
  done
  bad "job $j left things behind:"$'\n'"$(leftovers "$j")"
}

job_output() { # job_output FILE: print it indented
  echo "----- $1"
  sed 's/^/  | /' "$1" 2>/dev/null
  echo "-----"
}

plugin_log_lines() { grep -h "fanstore: user_init: job $1 " "$BASE"/log/slurmd.*.log 2>/dev/null; }

# ------------------------------------------------------------------------------------------ cluster
start_cluster() {
  local mode=$1 nodes=$2 tmpl
  local agent=${FANSTORE_TEST_AGENT:-$BUILD/bin/fanstore-agent}
  local preload=${FANSTORE_TEST_PRELOAD:-$BUILD/lib/libfanstore_preload.so}
  local f
  for f in "$BUILD/lib/spank_fanstore.so" "$BUILD/bin/fanstore" "$agent" "$preload"; do
    [[ -f $f ]] || { bad "missing build artefact $f (build the targets spank_fanstore fanstore fanstore-agent fanstore_preload)"; return 1; }
  done
  # The build tree may be private to root (e.g. under /root); install copies that every user can use.
  rm -rf "$OPT"
  install -d -m 0755 "$OPT" "$OPT/bin" "$OPT/lib"
  install -m 0755 "$agent" "$OPT/bin/fanstore-agent"
  install -m 0755 "$BUILD/bin/fanstore" "$OPT/bin/fanstore"
  install -m 0644 "$preload" "$OPT/lib/libfanstore_preload.so"
  install -m 0644 "$BUILD/lib/spank_fanstore.so" "$OPT/lib/spank_fanstore.so"
  install -m 0755 "$HERE/make_images.py" "$HERE/torch_epoch.py" "$OPT/bin/"
  install -d -m 1777 "$PFS"
  if [[ $mode == netns ]]; then tmpl=$BASE/local; else tmpl=$BASE/nodes/%n/local; fi
  "$CLUSTER" start --base "$BASE" --mode "$mode" --nodes "$nodes" --plugin "$OPT/lib/spank_fanstore.so" \
    --plugin-args "agent=$OPT/bin/fanstore-agent preload=$OPT/lib/libfanstore_preload.so local_dir=$tmpl stagein_timeout=$STAGEIN_TIMEOUT cache_size=1G" \
    || { bad "cluster start ($mode, $nodes nodes)"; return 1; }
  ok "cluster up: $mode mode, $nodes nodes, plugin $(cat "$BASE/plugstack.conf.d/fanstore.conf")"
}

need_cluster() { # need_cluster MODE
  [[ $("$CLUSTER" env --base "$BASE" 2>/dev/null | sed -n 's/^MODE=//p') == "$1" ]] \
    || { bad "no $1 cluster running (run the start-$1 case first)"; finish; exit 1; }
}

# ------------------------------------------------------------------------------------------ cases
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

case_md5() {
  need_cluster ports
  local ds jd j st t0 first stage
  ds=$(md5_dataset)
  jd=$(job_dir)
  (cd "$PFS/tree" && find . -type f | LC_ALL=C sort | while read -r f; do md5sum "$f"; done) >"$jd/expected"
  (cd "$PFS/tree" && find . | LC_ALL=C sort) >"$jd/expected.names"
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
#SBATCH --job-name=fanstore-md5
date +%s.%N > "$JD/first_read.$SLURM_JOB_ID"
head -c 1 "$FANSTORE_MOUNT/a/hello.txt" > /dev/null
date +%s.%N >> "$JD/first_read.$SLURM_JOB_ID"
echo "batch: $SLURMD_NODENAME mount=$FANSTORE_MOUNT"
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$FANSTORE_MOUNT" || exit 1
  while read -r sum f; do md5sum "$f"; done < "$JD/expected" > "$JD/md5.$SLURMD_NODENAME"
  find . | LC_ALL=C sort > "$JD/names.$SLURMD_NODENAME"
  echo "task on $SLURMD_NODENAME: LD_PRELOAD=$LD_PRELOAD"'
EOF
  chmod 0755 "$jd/job.sh"
  t0=$(now)
  # Submitted from $jd, so that the default --fanstore-stats file lands there.
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j completed" || bad "job $j ended $st"
  # Job end: every node's agent appends its final counters to fanstore-JOB.stats.
  local sf="$jd/fanstore-$j.stats" sum
  for _ in $(seq 150); do [[ -f $sf && $(wc -l <"$sf") -ge 2 ]] && break; sleep 0.2; done
  if [[ -f $sf && $(wc -l <"$sf") -eq 2 ]] && sum=$("$BUILD/bin/fanstore" stats "$sf" 2>&1) &&
     grep -q '^job total, 2 nodes' <<<"$sum" && [[ $(stat -c %U "$sf") == "$TUSER" ]]; then
    ok "job end: both agents saved their counters (owned by the job user); fanstore stats sums them: $(grep -A1 '^job total' <<<"$sum" | tail -1 | sed 's/^ *//')"
  else
    bad "job end: no summary of 2 nodes in $sf: $(cat "$sf" 2>&1 | head -3) / $sum"
  fi
  local n start
  for n in node1 node2; do
    if [[ -s $jd/md5.$n ]] && diff -u "$jd/expected" "$jd/md5.$n" >/dev/null; then
      ok "$n: md5 of all $(wc -l <"$jd/expected") files under the mount match the source"
    else
      bad "$n: md5 mismatch or missing:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.$n" 2>&1 | head -20)"
    fi
    if [[ -s $jd/names.$n ]] && diff -u "$jd/expected.names" "$jd/names.$n" >/dev/null; then
      ok "$n: find lists the same $(wc -l <"$jd/expected.names") names as the source"
    else
      bad "$n: find under the mount differs from the source:"$'\n'"$(diff -u "$jd/expected.names" "$jd/names.$n" 2>&1 | head -20)"
    fi
  done
  # J1: from job start (slurmctld allocates it) to the end of the batch script's first read, against
  # the batch step's wait for its agent, i.e. the stage-in. Goal: J1 <= stage-in + 1 s.
  start=$(sed -n "s/^\[\([^]]*\)\] sched: Allocate JobId=$j .*/\1/p" "$BASE/log/slurmctld.log" | head -1)
  stage=$(plugin_log_lines "$j" | sed -n 's/.*step batch on node1: agent ready after \([0-9.]*\) s.*/\1/p' | head -1)
  if [[ -s $jd/first_read.$j && -n $start && -n $stage ]]; then
    first=$(awk -v t0="$(date -d "$start" +%s.%N)" 'NR == 2 { printf "%.3f", $1 - t0 }' "$jd/first_read.$j")
    say "J1: job start -> first read done: $first s; stage-in (batch step's wait for its agent): $stage s"
    echo "J1 job_start_to_first_read_s=$first stagein_s=$stage" >"$BASE/jobs/j1.txt"
    awk -v f="$first" -v s="$stage" 'BEGIN { exit !(f <= s + 1.0) }' \
      && ok "J1: first read $first s after job start <= stage-in $stage s + 1 s" \
      || bad "J1: first read $first s after job start > stage-in $stage s + 1 s"
  else
    bad "J1: could not measure (start '${start}', stage-in '${stage}', first read file $jd/first_read.$j)"
  fi
  plugin_log_lines "$j" | sed 's/^/  log: /'
  check_clean "$j"
}

case_torch() {
  need_cluster ports
  local src=$PFS/images ds=$PFS/images.fs jd out ref st
  if [[ ! -d $src ]]; then
    asu "$PY" "$OPT/bin/make_images.py" "$src" 3 16 || bad "make_images"
  fi
  pack_dataset "$src" "$ds" --shard-size 64K || bad "pack $src"
  jd=$(job_dir)
  ref=$(asu "$PY" "$OPT/bin/torch_epoch.py" "$src" 2>&1 | grep '^EPOCH') || true
  say "reference on the source tree: $ref"
  [[ $ref == "EPOCH samples=48 classes=3 "* ]] || bad "reference epoch on the source: '$ref'"
  out=$(cd "$jd" && asu srun -N2 --ntasks-per-node=1 --fanstore="$ds" bash -c \
          'r=$('"$PY $OPT/bin/torch_epoch.py"' "$FANSTORE_MOUNT" 2>&1); echo "$r" >&2; echo "RESULT $SLURMD_NODENAME $SLURM_JOB_ID $(grep ^EPOCH <<<"$r")"' 2>&1)
  st=$?
  echo "$out" | sed 's/^/  | /'
  [[ $st -eq 0 ]] && ok "srun --fanstore torch epoch exited 0" || bad "srun exited $st"
  local n j
  for n in node1 node2; do
    if grep -q "^RESULT $n [0-9]* $ref\$" <<<"$out"; then ok "$n: ImageFolder+DataLoader(num_workers=2) epoch over the mount matches the source"
    else bad "$n: epoch over the mount differs from the source"; fi
  done
  j=$(awk '$1 == "RESULT" { print $3; exit }' <<<"$out")
  [[ -n $j ]] && check_clean "$j"
}

case_reject() {
  need_cluster ports
  local jd before after ds good
  jd=$(job_dir)
  good=$(md5_dataset)
  printf '#!/bin/bash\ntrue\n' >"$jd/job.sh"
  chmod 0755 "$jd/job.sh"
  mkdir -p "$PFS/reject"
  rm -rf "$PFS/reject"/*
  mkdir "$PFS/reject/plain.fs" "$PFS/reject/v9.fs" "$PFS/reject/private.fs"
  echo '{"format":"fanstore","version":9}' >"$PFS/reject/v9.fs/manifest.json"
  cp -r "$good"/. "$PFS/reject/private.fs/"
  chown -R "$TUSER:" "$PFS/reject"
  chmod 0755 "$PFS/reject"
  chown -R root: "$PFS/reject/private.fs" && chmod 0700 "$PFS/reject/private.fs"
  before=$(asroot squeue -h -t all | wc -l)
  expect_fail "missing dataset rejected by sbatch" 1 "$PFS/reject/missing.fs does not exist" \
    asu sbatch -N1 -o /dev/null --fanstore="$PFS/reject/missing.fs" "$jd/job.sh"
  expect_fail "not a dataset rejected by sbatch" 1 "$PFS/reject/plain.fs is not a FanStore dataset" \
    asu sbatch -N1 -o /dev/null --fanstore="$PFS/reject/plain.fs" "$jd/job.sh"
  expect_fail "wrong version rejected by sbatch" 1 "$PFS/reject/v9.fs/manifest.json: unsupported dataset version 9" \
    asu sbatch -N1 -o /dev/null --fanstore="$PFS/reject/v9.fs" "$jd/job.sh"
  expect_fail "unreadable dataset rejected by sbatch" 1 "$PFS/reject/private.fs is not readable by you" \
    asu sbatch -N1 -o /dev/null --fanstore="$PFS/reject/private.fs" "$jd/job.sh"
  expect_fail "relative path rejected by sbatch" 1 "must be given as an absolute path" \
    asu sbatch -N1 -o /dev/null --fanstore=tree.fs "$jd/job.sh"
  expect_fail "bad --fanstore-replicas rejected by sbatch" 1 "--fanstore-replicas=zero" \
    asu sbatch -N1 -o /dev/null --fanstore="$good" --fanstore-replicas=zero "$jd/job.sh"
  printf '#!/bin/bash\n#SBATCH --fanstore=%s\ntrue\n' "$PFS/reject/missing.fs" >"$jd/directive.sh"
  expect_fail "#SBATCH --fanstore with a missing dataset rejected" 1 "$PFS/reject/missing.fs does not exist" \
    asu sbatch -N1 -o /dev/null "$jd/directive.sh"
  expect_fail "missing dataset rejected by srun" 1 "$PFS/reject/missing.fs does not exist" \
    asu srun -N1 --fanstore="$PFS/reject/missing.fs" true
  expect_fail "missing dataset rejected by salloc" 1 "$PFS/reject/missing.fs does not exist" \
    asu salloc -N1 --fanstore="$PFS/reject/missing.fs" true
  after=$(asroot squeue -h -t all | wc -l)
  [[ $before == "$after" ]] && ok "no job was queued" || bad "jobs were queued: $before -> $after"
}

case_scancel() {
  need_cluster ports
  local src ds jd j uid state="" deadline t0 i n staging mb caught=0
  jd=$(job_dir)
  printf '#!/bin/bash\necho "the batch script must not run"\n' >"$jd/job.sh"
  chmod 0755 "$jd/job.sh"
  uid=$(uid_of)
  # The stage-in must last long enough to be caught: incompressible data, several shards. If the agents
  # are too fast for the first size, try again three times bigger.
  for mb in ${FANSTORE_TEST_SCANCEL_MB:-384 1152}; do
    src=$PFS/bulk$mb
    ds=$PFS/bulk$mb.fs
    if ! asu "$OPT/bin/fanstore" info "$ds" >/dev/null 2>&1; then
      rm -rf "$src" "$ds"
      mkdir -p "$src"
      for ((i = 0; i < 12; i++)); do head -c $((mb * 1048576 / 12)) /dev/urandom >"$src/part$i.bin"; done
      chown -R "$TUSER:" "$src"
      pack_dataset "$src" "$ds" --shard-size 32M --level 0 || bad "pack $src"
      rm -rf "$src"
    fi
    # For development stand-in agents that honour it: a marker that slows their stage-in.
    [[ -e $ds/FAKE_SLOW ]] || echo 30 >"$ds/FAKE_SLOW"
    j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do  # until both nodes' agents are staging
      staging=0
      for n in node1 node2; do
        state=$(sed -n 's/.*"state" *: *"\([a-z]*\)".*/\1/p' "/dev/shm/fanstore.$uid.$j.$n/status.json" 2>/dev/null)
        [[ $state == staging ]] && staging=$((staging + 1))
        [[ $state == ready || $state == failed ]] && break 2
      done
      ((staging == 2)) && { caught=1; break; }
      sleep 0.01
    done
    t0=$(now)
    asroot scancel "$j"
    state=$(wait_job "$j")
    say "job $j ($mb MiB dataset) ended $state $(elapsed "$t0") s after scancel"
    if ((caught)); then
      ok "job $j: scancel while the agents were staging on both nodes"
      break
    fi
    say "job $j: the stage-in of $mb MiB was over before it could be caught"
    check_clean "$j"
  done
  ((caught)) || { bad "never caught the agents while staging (set FANSTORE_TEST_SCANCEL_MB to larger sizes)"; return; }
  [[ $state == CANCELLED* ]] && ok "job $j cancelled" || bad "job $j ended $state"
  ! grep -q "must not run" "$jd/out.$j" 2>/dev/null && ok "the batch script never ran" || bad "the batch script ran"
  job_output "$jd/out.$j"
  check_clean "$j"
  say "cleanup complete $(elapsed "$t0") s after scancel"
}

case_agentfail() {
  need_cluster ports
  local good bad_ds=$PFS/corrupt.fs jd j st shard
  good=$(md5_dataset)
  rm -rf "$bad_ds"
  cp -r "$good" "$bad_ds"
  shard=$(ls "$bad_ds" | grep '^shard-' | head -1)
  # Flip one byte in the middle of the first shard: its hash no longer matches the manifest.
  printf '\xff' | dd of="$bad_ds/$shard" bs=1 seek=$(($(stat -c %s "$bad_ds/$shard") / 2)) conv=notrunc status=none
  chown -R "$TUSER:" "$bad_ds"
  jd=$(job_dir)
  printf '#!/bin/bash\necho "the batch script must not run"\n' >"$jd/job.sh"
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$bad_ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == FAILED ]] && ok "job $j with a corrupt shard failed" || bad "job $j ended $st"
  # node1's agent reports its own failure, or, when node2's failed first and the step was ended, the
  # batch step quotes the agents' output: either way the job output names the corrupt shard.
  grep -q "fanstore: task_init: the FanStore agent on node1 " "$jd/out.$j" && grep -q "$shard" "$jd/out.$j" \
    && ok "the job output carries the agent's message naming $shard" || bad "no agent message in the job output"
  ! grep -q "must not run" "$jd/out.$j" && ok "the batch script never ran" || bad "the batch script ran"
  check_clean "$j"
}

case_crash() {
  need_cluster ports
  local ds jd j st uid pid killed=0 deadline
  ds=$(md5_dataset)
  jd=$(job_dir)
  uid=$(uid_of)
  printf '#!/bin/bash\ntouch %s/started\nwhile [ ! -e %s/go ]; do sleep 0.1; done\n' "$jd" "$jd" >"$jd/job.sh"
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  deadline=$((SECONDS + 60))
  while [[ ! -e $jd/started ]] && ((SECONDS < deadline)); do sleep 0.1; done
  # The agents: the job user's (real, effective, saved, fs ids), under PMIx, without the interceptor.
  local agents=0 env
  for pid in $(pgrep -u "$TUSER" -x fanstore-agent); do
    env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null)
    grep -qx "SLURM_JOB_ID=$j" <<<"$env" || continue
    agents=$((agents + 1))
    [[ $(awk '/^Uid:/ { print $2 $3 $4 $5 }' "/proc/$pid/status") == "$uid$uid$uid$uid" ]] \
      && ! grep -q '^LD_PRELOAD=' <<<"$env" && grep -qx FANSTORE_DISABLE=1 <<<"$env" && grep -q '^PMIX_RANK=' <<<"$env" \
      || bad "agent $pid: not the job user's, or it has LD_PRELOAD, or no PMIx"
  done
  ((agents == 2)) && ok "2 agents run as $TUSER only, with PMIx, without LD_PRELOAD" || bad "found $agents agents of job $j"
  # SIGKILL node2's agent: it cannot clean up, so its directories stay until the epilog removes them.
  for pid in $(pgrep -u "$TUSER" -x fanstore-agent); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$j" || continue
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=node2" || continue
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "FANSTORE_AGENT_STEP=1" || continue
    kill -KILL "$pid" && killed=1
  done
  ((killed)) && ok "killed node2's agent with SIGKILL" || bad "found no agent of job $j on node2"
  sleep 0.5
  [[ -d /dev/shm/fanstore.$uid.$j.node2 ]] && ok "the killed agent left its run directory behind" \
    || bad "node2's run directory is already gone"
  touch "$jd/go"
  st=$(wait_job "$j")
  say "job $j ended $st"
  check_clean "$j"
}

case_direct() {
  need_cluster ports
  local ds jd out st j steps
  ds=$(md5_dataset)
  jd=$(job_dir)
  # 1. srun --fanstore straight from a login shell: the allocation, the agents and the tasks in one go.
  #    With the optional --fanstore-mount and --fanstore-replicas.
  out=$(cd "$jd" && asu srun -N2 --ntasks-per-node=1 --fanstore="$ds" --fanstore-mount=/data/tree \
          --fanstore-replicas=all \
          bash -c 'echo "$SLURMD_NODENAME $SLURM_JOB_ID $FANSTORE_MOUNT $(md5sum < /data/tree/a/b/numbers.txt)"' 2>&1)
  st=$?
  echo "$out" | sed 's/^/  | /'
  local want
  want=$(md5sum <"$PFS/tree/a/b/numbers.txt")
  want=${want%% *}
  [[ $st -eq 0 && $(grep -c " /data/tree $want  -\$" <<<"$out") == 2 ]] \
    && ok "srun --fanstore --fanstore-mount=/data/tree from a login shell: both nodes read the dataset there" \
    || bad "srun --fanstore from a login shell (exit $st)"
  j=$(awk 'NR == 1 { print $2 }' <<<"$out")
  [[ -n $j ]] && check_clean "$j"

  # 2. salloc --fanstore, then two sruns: the first starts the agents, the second reuses them.
  out=$(cd "$jd" && asu salloc -N2 --fanstore="$ds" bash -c '
    srun -N2 --ntasks-per-node=1 bash -c "echo first \$SLURMD_NODENAME \$(md5sum < \$FANSTORE_MOUNT/a/b/numbers.txt)"
    srun -N1 bash -c "echo second \$SLURMD_NODENAME \$(md5sum < \$FANSTORE_MOUNT/a/b/numbers.txt)"
    echo "agent steps: $(squeue -h -s -j $SLURM_JOB_ID -o %j | grep -c fanstore-agent)"
    echo "job $SLURM_JOB_ID"' 2>&1)
  st=$?
  echo "$out" | sed 's/^/  | /'
  [[ $st -eq 0 && $(grep -c "^first node[12] $want" <<<"$out") == 2 && $(grep -c "^second node1 $want" <<<"$out") == 1 ]] \
    && ok "salloc --fanstore + srun, srun: every task read the dataset" || bad "salloc + srun (exit $st)"
  grep -qx "agent steps: 1" <<<"$out" && ok "the second srun reused the agents (one agent step)" \
    || bad "expected exactly one agent step"
  j=$(sed -n 's/^job //p' <<<"$out")
  [[ -n $j ]] && check_clean "$j"
}

case_netns4() {
  need_cluster netns
  local ds jd j st n uid
  ds=$(md5_dataset)
  jd=$(job_dir)
  uid=$(uid_of)
  (cd "$PFS/tree" && find . -type f | LC_ALL=C sort | while read -r f; do md5sum "$f"; done) >"$jd/expected"
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
srun -N4 --ntasks-per-node=1 bash -c '
  cd "\$FANSTORE_MOUNT" || exit 1
  while read -r sum f; do md5sum "\$f"; done < $jd/expected > $jd/md5.\$SLURMD_NODENAME
  d=$BASE/local/fanstore.$uid.\$SLURM_JOB_ID
  echo "NODE \$(hostname) \$SLURMD_NODENAME \$(cat $BASE/local/.node-name) \$(test -d \$d && echo staged) \$FANSTORE_TABLE"'
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N4 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) \
    || { bad "sbatch: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "4-node netns job $j completed" || bad "job $j ended $st"
  for n in node1 node2 node3 node4; do
    grep -qx "NODE $n $n $n staged /dev/shm/fanstore.$uid.$j.$n/table" "$jd/out.$j" \
      && ok "$n: own hostname, own node-local directory holding the staged copy, own run directory" \
      || bad "$n: hostname / node-local directory / run directory"
    diff -q "$jd/expected" "$jd/md5.$n" >/dev/null 2>&1 && ok "$n: md5 of every file matches" || bad "$n: md5 mismatch"
  done
  check_clean "$j"
}

# ------------------------------------------------------------------ split datasets (--fanstore-replicas=1)
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

expected_md5() { (cd "$1" && find . -type f | LC_ALL=C sort | while read -r f; do md5sum "$f"; done); }

# fstool placement DS SRC NODES R: one JSON line per rank, as the agents place shards (round robin:
# shard s on ranks s..s+R-1 mod NODES, as agent/placement.cc): {"rank", "shards", "raw" bytes of their files,
# "pages" (the same in 4 KiB pages, as a tmpfs counts them), "source_bytes" (their shard files), "files":
# [{"path", "shard", "file", "offset", "stored", "codec", "size"}]}; then {"nshards", "min_shard_raw",
# "total_source"}.
fstool() {
  "$PY" - "$OPT/bin/fanstore" "$@" <<'PY'
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

case_split() {
  need_cluster ports
  local ds src=$PFS/many jd j st n r total src_bytes n_read stats status shards want ids
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  total=$(jget "$(tail -1 "$jd/placement")" "['total_source']")
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$FANSTORE_MOUNT" || exit 1
  while read -r sum f; do md5sum "$f"; done < "$JD/expected" > "$JD/md5.$SLURMD_NODENAME"'
touch "$JD/read"
while [ ! -e "$JD/go" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  if wait_for "$j" "$jd/read" 60; then
    for n in node1 node2; do
      status_of "$j" $n >"$jd/status.$n"
      agent_stats "$j" $n >"$jd/stats.$n"
    done
  fi
  touch "$jd/go"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j (--fanstore-replicas=1) completed" || bad "job $j ended $st"
  local all=()
  for n in node1 node2; do
    r=$((${n#node} - 1))
    status=$(cat "$jd/status.$n")
    stats=$(cat "$jd/stats.$n")
    [[ -n $status && -n $stats ]] || { bad "$n: no status.json or stats"; continue; }
    shards=$(jget "$status" "['shards']")
    want=$(jget "$(sed -n "$((r + 1))p" "$jd/placement")" "['shards']")
    read -ra ids <<<"$(tr -d '[],' <<<"$shards")"
    all+=("${ids[@]}")
    [[ $(jget "$status" "['rank']") == "$r" && $shards == "$want" ]] \
      && ok "$n (rank $r) staged $(wc -w <<<"${shards//,/ }") of 28 shards, as the placement says: $shards" \
      || bad "$n: rank $(jget "$status" "['rank']"), shards $shards; placement says rank $r holds $want"
    src_bytes=$(jget "$(sed -n "$((r + 1))p" "$jd/placement")" "['source_bytes']")
    n_read=$(jget "$stats" "['bytes_read_from_source']")
    ((n_read == src_bytes && n_read * 4 < total * 3)) \
      && ok "$n read $n_read of the dataset's $total bytes from the parallel file system ($((n_read * 100 / total)) %: its shards only)" \
      || bad "$n read $n_read bytes from the source (its shards: $src_bytes, dataset: $total)"
    say "$n stats: opens $(jget "$stats" "['opens']") bytes $(jget "$stats" "['bytes']") prefetch $(jget "$stats" "['prefetch']")"
    (($(jget "$stats" "['opens']['remote'] + d['opens']['cached']") > 0 && $(jget "$stats" "['opens']['local']") > 0)) \
      && ok "$n: files held here opened locally ($(jget "$stats" "['opens']['local']")), files of the other node through the peer or the cache (remote $(jget "$stats" "['opens']['remote']"), cached $(jget "$stats" "['opens']['cached']"), prefetched $(jget "$stats" "['prefetch']['files']"))" \
      || bad "$n: no local or no remote/cached opens: $(jget "$stats" "['opens']")"
    [[ $(jget "$stats" "['cache']['capacity']") == $((1 << 30)) ]] \
      && ok "$n: the site's cache_size=1G reached the agent" || bad "$n: cache capacity $(jget "$stats" "['cache']")"
    (($(jget "$stats" "['opens']['fallback'] + d['opens']['errors'] + d['peers']['fetch_errors']") == 0)) \
      && ok "$n: no fallback to the dataset, no error while both agents are up" || bad "$n: fallbacks or errors: $(jget "$stats" "['opens']") $(jget "$stats" "['peers']")"
    if [[ -s $jd/md5.$n ]] && diff -q "$jd/expected" "$jd/md5.$n" >/dev/null; then
      ok "$n: md5 of all $(wc -l <"$jd/expected") files matches the source"
    else
      bad "$n: md5 mismatch:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.$n" 2>&1 | head -10)"
    fi
  done
  [[ $(printf '%s\n' "${all[@]}" | sort -n | uniq | wc -l) == 28 && ${#all[@]} == 28 ]] \
    && ok "the two nodes' shards are disjoint and cover all 28" || bad "shards of the two nodes: ${all[*]}"
  ((${#all[@]} == 28)) && (($(jget "$(cat "$jd/stats.node1")" "['bytes_read_from_source']") + $(jget "$(cat "$jd/stats.node2")" "['bytes_read_from_source']") == total)) \
    && ok "together they read the dataset once ($total bytes)" || bad "the two stage-ins did not add up to the dataset"
  check_clean "$j"
}

# The node-local directory for node1 in the next cases: its share plus 256 KiB. The agent's cache is then
# about 120 KiB, smaller than any shard (at least 250 KiB): nothing is prefetched.
small_node1() { # small_node1 PLACEMENT_FILE
  local pages
  pages=$(jget "$(sed -n 1p "$1")" "['pages']")
  small_local node1 $((pages + 262144))
}

case_peerkill() {
  need_cluster ports
  local ds src=$PFS/many jd j st stats n2files nfirst killed pid1 pid2 fb
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  # node2's files; the first ten are read through node1 while node2's agent is up.
  "$PY" -c "import json, sys; [print('./' + f['path']) for f in json.loads(sys.stdin.readline())['files']]" \
    < <(sed -n 2p "$jd/placement") >"$jd/node2.files"
  awk 'NR == FNR { want[$0]; next } $2 in want' <(head -10 "$jd/node2.files") "$jd/expected" >"$jd/first"
  n2files=$(wc -l <"$jd/node2.files")
  nfirst=$(wc -l <"$jd/first")
  small_node1 "$jd/placement" || { bad "small node-local directory on node1"; return; }
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
md5_on() { srun -N1 -w "$1" bash -c 'cd "$FANSTORE_MOUNT" && while read -r sum f; do md5sum "$f"; done' < "$2"; }
md5_on node1 "$JD/first" > "$JD/md5.first"
# From inside the job: node2's agent, from its status.json, killed with SIGKILL.
srun -N1 -w node2 bash -c 'p=$(sed -n "s/.*\"pid\":\([0-9]*\).*/\1/p" "${FANSTORE_SOCKET%/*}/status.json")
  kill -KILL "$p" && echo "killed $p"' > "$JD/killed"
sleep 0.5
md5_on node1 "$JD/expected" > "$JD/md5.after"
touch "$JD/read"
while [ ! -e "$JD/go" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; restore_local node1; return; }
  if wait_for "$j" "$jd/read" 90; then
    stats=$(agent_stats "$j" node1)
    pid1=$(jget "$(status_of "$j" node1)" "['pid']")
    pid2=$(sed -n 's/^killed //p' "$jd/killed")
    launch_log "$j" >"$jd/launch.log"
    asroot squeue -h -s -j "$j" -o %j >"$jd/steps"
  fi
  touch "$jd/go"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  diff -q <(cat "$jd/first") "$jd/md5.first" >/dev/null && ok "node1 read $nfirst of node2's files while node2's agent was up" \
    || bad "the first reads on node1 failed"
  [[ -n $pid2 ]] && ! kill -0 "$pid2" 2>/dev/null && ok "the job script killed node2's agent (pid $pid2) with SIGKILL" \
    || bad "node2's agent was not killed (pid '$pid2')"
  # The agent step goes on without it: --kill-on-bad-exit must not take node1's agent down too.
  [[ -n $stats ]] && grep -qx fanstore-agent "$jd/steps" \
    && ok "node1's agent (pid $pid1) and the agent step lived on after node2's agent died" \
    || bad "node1's agent or the agent step ended with node2's agent"
  grep -q "this agent ended (status 137) after it was ready" "$jd/launch.log" \
    && ok "the agent step noted node2's death: $(grep -m1 'this agent ended' "$jd/launch.log")" \
    || bad "no note of node2's agent's death in the launch log"
  if [[ -s $jd/md5.after ]] && diff -q "$jd/expected" "$jd/md5.after" >/dev/null; then
    ok "node1: md5 of all $(wc -l <"$jd/expected") files matches the source after node2's agent died ($n2files of them held by node2 only)"
  else
    bad "node1: md5 mismatch after the kill:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.after" 2>&1 | head -10)"
  fi
  [[ -n $stats ]] || { bad "no stats from node1's agent"; restore_local node1; check_clean "$j"; return; }
  say "node1 stats: opens $(jget "$stats" "['opens']") bytes $(jget "$stats" "['bytes']") cache $(jget "$stats" "['cache']") prefetch $(jget "$stats" "['prefetch']") peers $(jget "$stats" "['peers']")"
  (($(jget "$stats" "['cache']['capacity']") < $(jget "$(tail -1 "$jd/placement")" "['min_shard_raw']") && $(jget "$stats" "['prefetch']['files']") == 0)) \
    && ok "node1's cache ($(jget "$stats" "['cache']['capacity']") bytes) holds no shard: nothing was prefetched" \
    || bad "node1's cache is not tiny or it prefetched: $(jget "$stats" "['cache']") $(jget "$stats" "['prefetch']")"
  (($(jget "$stats" "['opens']['remote']") >= nfirst)) && ok "before the kill, node2's files came from its agent (remote opens $(jget "$stats" "['opens']['remote']"))" \
    || bad "remote opens $(jget "$stats" "['opens']['remote']") < $nfirst"
  fb=$(jget "$stats" "['opens']['fallback']")
  ((fb >= n2files - nfirst && $(jget "$stats" "['opens']['errors']") == 0)) \
    && ok "after the kill, node2's files came from the dataset directory: $fb fallback opens ($(jget "$stats" "['bytes']['fallback']") bytes) for $((n2files - nfirst)) files never read before; $(jget "$stats" "['opens']['cached']") from the cache; no error" \
    || bad "fallback opens $fb < $((n2files - nfirst)) or errors: $(jget "$stats" "['opens']")"
  # The first fetch after the kill fails on the dead connection; the peer is then marked down, and the
  # next opens skip it at once: one fetch error, one warning, every other open straight to fallback.
  grep -m1 "fetch .* from rank 1: " "$jd/launch.log" | sed 's/^/  agent: /'
  (($(jget "$stats" "['peers']['fetch_errors']") == 1)) && (($(grep -c "from rank 1: " "$jd/launch.log") == 1)) \
    && ok "the dead peer was noticed once, then skipped as down (1 fetch error, 1 warning, $fb fallback opens)" \
    || bad "fetch errors $(jget "$stats" "['peers']['fetch_errors']"), warnings $(grep -c "from rank 1: " "$jd/launch.log"): the dead peer was not skipped"
  check_clean "$j"
  restore_local node1
}

# files_of PLACEMENT_FILE RANK: the paths ("./x/f1.bin") of the files that rank holds.
files_of() {
  "$PY" -c "import json, sys; [print('./' + f['path']) for f in json.loads(sys.stdin.readline())['files']]" \
    < <(sed -n "$(($2 + 1))p" "$1")
}

case_corrupt() {
  need_cluster ports
  local good src=$PFS/many ds=$PFS/many-corrupt.fs jd j st stats victim vshard voff vlen vcodec pid2 others
  good=$(many_dataset)
  rm -rf "$ds"
  cp -r "$good" "$ds"
  chown -R "$TUSER:" "$ds"
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  # The victim: an incompressible file held by node2 only; the other files of node2 must still read.
  read -r victim vshard voff vlen vcodec < <("$PY" -c "
import json, sys
f = [f for f in json.loads(sys.stdin.readline())['files'] if f['path'].startswith('x/')][0]
print(f['path'], f['file'], f['offset'], f['stored'], f['codec'])" < <(sed -n 2p "$jd/placement"))
  files_of "$jd/placement" 1 | grep -vx "./$victim" >"$jd/others.files"
  awk 'NR == FNR { want[$0]; next } $2 in want' "$jd/others.files" "$jd/expected" >"$jd/others"
  others=$(wc -l <"$jd/others")
  cat >"$jd/read.py" <<'PY'
import errno, hashlib, sys
# Reads one file as an application would; says what it got: the error, or the md5 of the bytes.
for attempt in (1, 2):
    try:
        with open(sys.argv[1], 'rb') as f:
            data = f.read()
        print("attempt %d: read %d bytes md5 %s" % (attempt, len(data), hashlib.md5(data).hexdigest()))
    except OSError as e:
        print("attempt %d: error %s" % (attempt, errno.errorcode.get(e.errno, e.errno)))
PY
  small_node1 "$jd/placement" || { bad "small node-local directory on node1"; return; }
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
touch "$jd/started"
while [ ! -e "$jd/go" ]; do sleep 0.1; done
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $victim > $jd/victim.out
  while read -r sum f; do md5sum "\$f"; done < $jd/others > $jd/md5.others'
touch "$jd/read"
while [ ! -e "$jd/go2" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" --fanstore-replicas=1 "$jd/job.sh" 2>&1) \
    || { bad "sbatch: $j"; restore_local node1; return; }
  if wait_for "$j" "$jd/started" 60 && wait_ready "$j" node2; then
    ok "stage-in done on both nodes; victim $victim: $vshard at $voff, $vlen bytes ($vcodec), held by node2 only"
    # node2's agent becomes unavailable, then a frame of its shard is damaged on the parallel file system.
    pid2=$(jget "$(status_of "$j" node2)" "['pid']")
    kill -KILL "$pid2"
    for _ in $(seq 50); do kill -0 "$pid2" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$pid2" 2>/dev/null && ok "node2's agent (pid $pid2) killed" || bad "node2's agent $pid2 survived SIGKILL"
    printf '\xff\xfe' | dd of="$ds/$vshard" bs=1 seek=$((voff + vlen / 2)) conv=notrunc status=none
    cmp -s "$good/$vshard" "$ds/$vshard" && bad "the shard was not changed" || ok "2 bytes flipped in the middle of the frame of $victim in $vshard"
    touch "$jd/go"
    wait_for "$j" "$jd/read" 60 && stats=$(agent_stats "$j" node1)
    launch_log "$j" >"$jd/launch.log"
  fi
  touch "$jd/go" "$jd/go2"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  sed 's/^/  node1: /' "$jd/victim.out" 2>/dev/null
  [[ $(grep -c "error EIO" "$jd/victim.out" 2>/dev/null) == 2 ]] && ! grep -q "bytes" "$jd/victim.out" \
    && ok "node1: reading $victim gives EIO, twice, never bytes" || bad "node1: $victim did not give EIO"
  grep -m1 "error: open $victim: " "$jd/launch.log" | sed 's/^/  agent: /'
  grep -q "error: open $victim: .*checksum mismatch" "$jd/launch.log" \
    && ok "node1's agent logged the checksum mismatch of the frame it read from $vshard" || bad "no checksum error in the agents' log"
  diff -q "$jd/others" "$jd/md5.others" >/dev/null 2>&1 \
    && ok "node1: the $others other files of node2 read correctly from the dataset directory" \
    || bad "node1: node2's other files:"$'\n'"$(diff -u "$jd/others" "$jd/md5.others" 2>&1 | head -10)"
  if [[ -n $stats ]]; then
    say "node1 stats: opens $(jget "$stats" "['opens']") prefetch $(jget "$stats" "['prefetch']") peers $(jget "$stats" "['peers']")"
    (($(jget "$stats" "['opens']['errors']") >= 1 && $(jget "$stats" "['opens']['fallback']") >= others && $(jget "$stats" "['prefetch']['files']") == 0)) \
      && ok "node1's agent counted the failed open ($(jget "$stats" "['opens']['errors']") errors) and $(jget "$stats" "['opens']['fallback']") fallback opens; nothing prefetched" \
      || bad "node1's stats: $(jget "$stats" "['opens']") $(jget "$stats" "['prefetch']")"
  else
    bad "no stats from node1's agent"
  fi
  check_clean "$j"
  restore_local node1
  rm -rf "$ds"
}

case_auth() {
  need_cluster ports
  local ds src=$PFS/many jd j st ep out stats shard run pid
  ds=$(many_dataset)
  jd=$(job_dir)
  chmod 0755 "$jd"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  shard=$(jget "$(sed -n 2p "$jd/placement")" "['shards'][0]")
  printf '#!/bin/bash\ntouch %s/started\nwhile [ ! -e %s/go ]; do sleep 0.1; done\n' "$jd" "$jd" >"$jd/job.sh"
  chmod 0755 "$jd/job.sh"
  # The peer protocol of agent/peer.h, as another user would speak it (tests/peer_probe.py).
  cp "$HERE/../peer_probe.py" "$jd/attack.py"
  # Submitted with a soft limit of 777 open files: the agents must run with the job's limits.
  j=$(asu bash -c 'ulimit -Sn 777 && exec "$@"' sh sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) \
    || { bad "sbatch: $j"; return; }
  if wait_for "$j" "$jd/started" 60 && wait_ready "$j" node2; then
    run=$(run_dir_of "$j" node2)
    ep=$(jget "$(status_of "$j" node2)" "['endpoint']")
    say "node2's agent: endpoint $ep (read by root from $run/status.json); shard $shard is held there"
    pid=$(jget "$(status_of "$j" node2)" "['pid']")
    [[ $(awk '/Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null) == 777 ]] \
      && ok "the agent runs with the job's limits (soft open files 777), not slurmstepd's" \
      || bad "the agent's open-file limit: $(grep 'Max open files' "/proc/$pid/limits" 2>&1)"
    out=$(runuser -u fsbob -- timeout 60 "$PY" "$jd/attack.py" "$ep" 1 "$shard" 2>&1)
    echo "$out" | sed 's/^/  fsbob: /'
    grep -q "decode the server's proof: exit [1-9]" <<<"$out" \
      && ok "fsbob cannot decode the agent's proof (a credential for the job's uid only)" || bad "fsbob decoded the agent's proof"
    grep -qx "own credential: status 13 bytes after 0" <<<"$out" \
      && ok "fsbob's own valid MUNGE credential is refused (EACCES) and nothing follows" || bad "fsbob's credential was not refused"
    grep -qx "no credential: bytes 0" <<<"$out" && ok "fsbob without a credential gets no byte" || bad "fsbob got data without a credential"
    grep -qx "forged credential: status 13 bytes after 0" <<<"$out" && ok "a forged credential is refused" || bad "a forged credential was not refused"
    grep -qx "4 GiB length: bytes 0" <<<"$out" && ok "a 4 GiB length is dropped (F2)" || bad "4 GiB length"
    grep -qx "slow connections: opened 200 closed by the agent 200" <<<"$out" \
      && ok "200 slow connections are closed at their deadline (F3, F10)" || bad "slow connections were not all closed"
    launch_log "$j" | grep -m1 "credential of uid $(id -u fsbob)" | sed 's/^/  agent: /'
    stats=$(agent_stats "$j" node2)
    (($(jget "$stats" "['peers']['refused_connections']") >= 3)) \
      && ok "node2's agent counted $(jget "$stats" "['peers']['refused_connections']") refused connections" \
      || bad "refused connections: $(jget "$stats" "['peers']")"
    expect_fail "fsbob cannot read node2's status.json" 1 "Permission denied" runuser -u fsbob -- cat "$run/status.json"
    expect_fail "fsbob cannot use node2's agent socket" 1 "Permission denied" \
      runuser -u fsbob -- "$PY" -c "import socket, sys
try: socket.socket(socket.AF_UNIX).connect('$run/agent.sock')
except OSError as e: sys.exit('connect $run/agent.sock: ' + e.strerror)"
    [[ $(stat -c '%a %U' "$run") == "700 $TUSER" && $(stat -c '%a %U' "$run/agent.sock") == "600 $TUSER" ]] \
      && ok "run directory 0700 and socket 0600, of $TUSER" || bad "run directory/socket modes: $(stat -c '%a %U %n' "$run" "$run/agent.sock")"
  else
    bad "the agents were not ready"
  fi
  touch "$jd/go"
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "job $j completed" || bad "job $j ended $st"
  check_clean "$j"
}

# F4, F12: another user plants files, a directory and symlinks under every name the next job of the
# test user will use (run directories, node-local directories, the launch directory), before it is
# submitted. The job must complete with correct data, no node may drain, and the planted objects
# must be moved aside, not deleted.
case_planted() {
  need_cluster ports
  local ds jd j j0 uid st n planted=() p
  ds=$(md5_dataset)
  jd=$(job_dir)
  uid=$(uid_of)
  j0=$(asu sbatch --parsable -N1 -o /dev/null --wrap true 2>&1) || { bad "sbatch: $j0"; return; }
  wait_job "$j0" >/dev/null
  j=$((j0 + 1))
  runuser -u fsbob -- bash -c "
    mkdir -p /dev/shm/fsbob-trap && chmod 0777 /dev/shm/fsbob-trap
    echo planted > /dev/shm/fanstore.$uid.$j.node1 && chmod 0666 /dev/shm/fanstore.$uid.$j.node1
    ln -s /dev/shm/fsbob-trap /dev/shm/fanstore.$uid.$j.node2
    echo planted > /dev/shm/fanstore.$uid && chmod 0666 /dev/shm/fanstore.$uid
    mkdir -m 0777 $(node_local node1)/fanstore.$uid.$j
    ln -s /etc $(node_local node2)/fanstore.$uid.$j" || { bad "fsbob could not plant"; return; }
  planted=("/dev/shm/fanstore.$uid.$j.node1" "/dev/shm/fanstore.$uid.$j.node2" "/dev/shm/fanstore.$uid"
    "$(node_local node1)/fanstore.$uid.$j" "$(node_local node2)/fanstore.$uid.$j")
  (cd "$PFS/tree" && find . -type f | LC_ALL=C sort | while read -r f; do md5sum "$f"; done) >"$jd/expected"
  printf '#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '"'"'cd "$FANSTORE_MOUNT" && while read -r s f; do md5sum "$f"; done < %s/expected > %s/md5.$SLURMD_NODENAME'"'"'
' "$jd" "$jd" >"$jd/job.sh"
  chmod 0755 "$jd/job.sh"
  n=$(asu sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $n"; return; }
  [[ $n == "$j" ]] || { bad "the job got id $n, not the predicted $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed despite everything fsbob planted" || bad "job $j ended $st"
  for n in node1 node2; do
    diff -q "$jd/expected" "$jd/md5.$n" >/dev/null 2>&1 && ok "$n: every file read correctly" || bad "$n: md5 mismatch or missing"
  done
  st=$(asroot sinfo -h -o '%n %T' | grep -E "drain|down" || true)
  [[ -z $st ]] && ok "no node drained" || bad "nodes drained: $st"
  for p in "${planted[@]}"; do
    if find "$(dirname "$p")" -maxdepth 1 -user fsbob -name "$(basename "$p")*" | grep -q .; then
      ok "planted $(basename "$p") moved aside or left alone, not deleted"
    else
      bad "planted $p is gone"
    fi
  done
  [[ $(cat /dev/shm/fsbob-trap/* 2>/dev/null | wc -c) -eq 0 && -z $(ls /dev/shm/fsbob-trap) ]] \
    && ok "nothing of the job went through fsbob's symlinks" || bad "the job wrote into fsbob's directory: $(ls /dev/shm/fsbob-trap)"
  grep -h "moved aside" "$BASE"/log/slurmd.*.log 2>/dev/null | grep -m2 "job $j" | sed 's/^/  log: /'
  check_clean "$j"
  for p in "${planted[@]}"; do find "$(dirname "$p")" -maxdepth 1 -user fsbob -name "$(basename "$p")*" -exec rm -rf {} +; done
  rm -rf /dev/shm/fsbob-trap
}

case_linkdown() {
  need_cluster netns
  local ds src=$PFS/many jd j st stats veth=fslv2h hub=fsl-hub n2files total maxf slow ok_read=0
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  n2files=$(files_of "$jd/placement" 1 | wc -l)
  awk 'NR == FNR { want[$0]; next } $2 in want' <(files_of "$jd/placement" 1) "$jd/expected" >"$jd/node2"
  head -10 "$jd/node2" >"$jd/first"
  cat >"$jd/read.py" <<'PY'
import hashlib, sys, time
# md5 of every listed file, and how long each took.
with open(sys.argv[2], 'w') as out, open(sys.argv[3], 'w') as times:
    for line in open(sys.argv[1]):
        path = line.rstrip('\n').split('  ', 1)[1]
        t = time.monotonic()
        with open(path, 'rb') as f:
            data = f.read()
        times.write("%.3f %s\n" % (time.monotonic() - t, path))
        out.write("%s  %s\n" % (hashlib.md5(data).hexdigest(), path))
PY
  small_node1 "$jd/placement" || { bad "small node-local directory on node1"; return; }
  cat >"$jd/job.sh" <<EOF
#!/bin/bash
# Before: node1 reads ten of node2's files, so that it holds an open connection to node2's agent.
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $jd/first $jd/md5.first $jd/times.first'
touch "$jd/started"
while [ ! -e "$jd/go" ]; do sleep 0.1; done
t0=\$(date +%s.%N)
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $jd/expected $jd/md5.node1 $jd/times.node1'
t1=\$(date +%s.%N)
# Once node2 is no longer marked down (10 s), its files again: the agent tries to connect anew.
sleep 10.5
srun -N1 -w node1 bash -c 'cd "\$FANSTORE_MOUNT" && $PY $jd/read.py $jd/node2 $jd/md5.again $jd/times.again'
echo "\$t0 \$t1 \$(date +%s.%N)" > "$jd/read"
while [ ! -e "$jd/go2" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu sbatch --parsable -N2 -w node1,node2 --chdir="$jd" -o "$jd/out.%j" --fanstore="$ds" --fanstore-replicas=1 \
        "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; restore_local node1; return; }
  if wait_for "$j" "$jd/started" 60 && wait_ready "$j" node2; then
    # node2 drops off the network: the hub side of its veth goes down.
    if ip -n "$hub" link set "$veth" down; then
      ok "node2 unreachable: ip -n $hub link set $veth down"
      ip netns exec fsl-node1 ping -c1 -W1 10.77.0.2 >/dev/null 2>&1 && bad "node1 still reaches node2" || ok "node1 no longer reaches 10.77.0.2"
    else
      bad "ip link set $veth down"
    fi
    touch "$jd/go"
    wait_for "$j" "$jd/read" 90 && ok_read=1
    stats=$(agent_stats "$j" node1)
    launch_log "$j" >"$jd/launch.log"
    ip -n "$hub" link set "$veth" up || bad "ip link set $veth up"
  fi
  ip -n "$hub" link set "$veth" up 2>/dev/null
  touch "$jd/go" "$jd/go2"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "job $j completed (node2 back on the network before its end)" || bad "job $j ended $st"
  if [[ -s $jd/md5.node1 ]] && diff -q "$jd/expected" "$jd/md5.node1" >/dev/null; then
    ok "node1: md5 of all $(wc -l <"$jd/expected") files matches the source with node2 unreachable ($n2files held by node2 only)"
  else
    bad "node1: md5 mismatch:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.node1" 2>&1 | head -10)"
  fi
  if ((ok_read)); then
    # With the connection that node1 had open to node2, the first request waits for the agent's I/O
    # timeout (3 s without progress); node2 is then marked down and skipped. After that, a new connection attempt costs
    # the connect timeout (1.5 s).
    total=$(awk '{ printf "%.2f", $2 - $1 }' "$jd/read")
    maxf=$(sort -rn "$jd/times.node1" | awk 'NR == 1 { print $1, $2 }')
    slow=$(awk '$1 > 1.0' "$jd/times.node1" | wc -l)
    say "all files, node2 just unreachable: $total s (srun step included); slowest: ${maxf%% *} s (${maxf#* }); files over 1 s: $slow"
    awk -v t="$total" -v m="${maxf%% *}" -v n="$slow" 'BEGIN { exit !(t < 15 && m < 5 && n == 1) }' \
      && ok "bounded: one open waited ${maxf%% *} s (the I/O timeout on the open connection), the other $(($(wc -l <"$jd/times.node1") - 1)) files no more than 1 s; all in $total s" \
      || bad "too slow: $total s in all, slowest file $maxf, $slow files over 1 s"
    total=$(awk '{ printf "%.2f", $3 - $2 }' "$jd/read")
    maxf=$(sort -rn "$jd/times.again" | awk 'NR == 1 { print $1, $2 }')
    slow=$(awk '$1 > 1.0' "$jd/times.again" | wc -l)
    say "node2's files again, 10.5 s later: slowest: ${maxf%% *} s (${maxf#* }); files over 1 s: $slow"
    awk -v m="${maxf%% *}" -v n="$slow" 'BEGIN { exit !(m < 3 && n == 1) }' \
      && ok "after node2's 10 s as down: one open waited ${maxf%% *} s (the connect timeout), then node2 was skipped again" \
      || bad "second round: slowest file $maxf, $slow files over 1 s"
    diff -q "$jd/node2" "$jd/md5.again" >/dev/null 2>&1 && ok "node1: node2's $n2files files read correctly again" \
      || bad "node1: second round md5 mismatch"
  else
    bad "node1's reads did not finish in 90 s"
  fi
  grep -E "fetch .* from rank 1" "$jd/launch.log" | head -3 | sed 's/^/  agent: /'
  if [[ -n $stats ]]; then
    say "node1 stats: opens $(jget "$stats" "['opens']") bytes $(jget "$stats" "['bytes']") prefetch $(jget "$stats" "['prefetch']") peers $(jget "$stats" "['peers']")"
    (($(jget "$stats" "['opens']['fallback']") >= n2files - 1 && $(jget "$stats" "['opens']['errors']") == 0 && $(jget "$stats" "['peers']['fetch_errors']") >= 1)) \
      && ok "node1 served node2's files from the dataset directory ($(jget "$stats" "['opens']['fallback']") fallback opens, $(jget "$stats" "['peers']['fetch_errors']") failed fetches, no error)" \
      || bad "node1's stats: $(jget "$stats" "['opens']") $(jget "$stats" "['peers']")"
  else
    bad "no stats from node1's agent"
  fi
  check_clean "$j"
  restore_local node1
}

case_stop() {
  "$CLUSTER" stop --base "$BASE" >/dev/null || bad "cluster stop"
  local left
  left=$(find /dev/shm -maxdepth 1 -name "fanstore.$(uid_of).*" 2>/dev/null)
  [[ -z $left ]] && ok "cluster stopped; no FanStore run directory left in /dev/shm" || bad "left in /dev/shm: $left"
}

case $CASE in
  start-ports) start_cluster ports 2 ;;
  start-netns) start_cluster netns 4 ;;
  stop) case_stop ;;
  md5) case_md5 ;;
  torch) case_torch ;;
  reject) case_reject ;;
  scancel) case_scancel ;;
  direct) case_direct ;;
  agentfail) case_agentfail ;;
  crash) case_crash ;;
  netns4) case_netns4 ;;
  split) case_split ;;
  peerkill) case_peerkill ;;
  corrupt) case_corrupt ;;
  auth) case_auth ;;
  planted) case_planted ;;
  linkdown) case_linkdown ;;
  *) echo "unknown case $CASE" >&2; exit 2 ;;
esac
finish
