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
#
# The agent and the interception library default to BUILD_DIR/bin/fanstore-agent and
# BUILD_DIR/lib/libfanstore_preload.so; FANSTORE_TEST_AGENT / FANSTORE_TEST_PRELOAD override them.
# Exit status 77 (ctest: skipped) when not root.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -eq 2 ]] || { sed -n '2,20p' "$0"; exit 2; }
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
  for p in /proc/[0-9]*; do
    [[ $(stat -c %u "$p" 2>/dev/null) == "$uid" ]] || continue
    st=$(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f1)
    [[ -z $st || $st == Z || $st == X ]] && continue
    if tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$j"; then
      echo "process ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-120)"
    fi
  done
  find /dev/shm -maxdepth 1 -name "fanstore.$uid.$j*" -printf 'shm %p\n' 2>/dev/null
  find "$BASE"/nodes/*/local -maxdepth 1 -name "fanstore.$uid.$j" -printf 'local %p\n' 2>/dev/null
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
    --plugin-args "agent=$OPT/bin/fanstore-agent preload=$OPT/lib/libfanstore_preload.so local_dir=$tmpl stagein_timeout=$STAGEIN_TIMEOUT" \
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
  j=$(asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j completed" || bad "job $j ended $st"
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
  *) echo "unknown case $CASE" >&2; exit 2 ;;
esac
finish
