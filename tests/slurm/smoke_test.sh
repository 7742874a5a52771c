#!/usr/bin/env bash
# Smoke test for the test cluster (tests/slurm/cluster.sh). Run as root.
#  1. ports mode, 2 nodes: a 2-node sbatch job by fsalice runs
#       srun --mpi=pmix -N2 --ntasks-per-node=1 hostname; echo SLURMD_NODENAME=...; srun --mpi=pmix -N2 env | grep PMIX_RANK
#  2. netns mode, 4 nodes: the same with -N4, expecting 4 distinct hostnames node1..node4 and a
#     different node-local directory <base>/local on each node.
#  3. cluster.sh stop leaves no slurm/munge process, no netns, no mount.
# Usage: smoke_test.sh [--base DIR] [--keep]     (--keep: leave the last cluster running)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER="$HERE/cluster.sh"
BASE=${FANSTORE_SLURM_BASE:-/var/tmp/fanstore-slurm}
KEEP=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --base) BASE=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "usage: $0 [--base DIR] [--keep]" >&2; exit 2 ;;
  esac
done
BASE=$(realpath -m "$BASE")
USER_UNDER_TEST=fsalice
JOB_TIMEOUT=90

say()  { echo "smoke: $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
since() { local d=$(($(now_ms) - $1)); printf '%d.%03d' $((d / 1000)) $((d % 1000)); }
fail() {
  echo "smoke: FAIL: $*" >&2
  [[ $KEEP == 1 ]] || "$CLUSTER" stop --base "$BASE" >/dev/null 2>&1 || true
  exit 1
}
[[ $(id -u) -eq 0 ]] || { echo "smoke: must run as root" >&2; exit 1; }

cl() { "$CLUSTER" exec --base "$BASE" -- "$@"; }

# wait_job JOBID -> final state on stdout; polls squeue (sbatch --wait polls every 10 s)
wait_job() {
  local j=$1 st="" deadline=$((SECONDS + JOB_TIMEOUT))
  while ((SECONDS < deadline)); do
    st=$(cl squeue -h -t all -j "$j" -o %T 2>/dev/null || true)
    case $st in
      COMPLETED|FAILED|CANCELLED*|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) echo "$st"; return 0 ;;
    esac
    sleep 0.2
  done
  echo "TIMEOUT_WAITING(last state: ${st:-none})"
}

# run_check MODE NODES
run_check() {
  local mode=$1 n=$2 t0 dir out jid st ec hosts nh
  say "=== $mode mode, $n nodes"
  t0=$(now_ms)
  "$CLUSTER" start --base "$BASE" --mode "$mode" --nodes "$n" || fail "cluster start ($mode) failed"
  say "start took $(since "$t0")s"
  "$CLUSTER" status --base "$BASE" >/dev/null || fail "cluster status says not up"

  dir=$BASE/jobs/smoke-$mode-$$
  mkdir -p "$dir"
  chown "$USER_UNDER_TEST:" "$dir"
  cat >"$dir/job.sh" <<'EOF'
#!/bin/bash
srun --mpi=pmix -N"$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 hostname
echo SLURMD_NODENAME=$SLURMD_NODENAME
srun --mpi=pmix -N"$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
  bash -c 'd=${FANSTORE_TEST_LOCAL_TMPL//%n/$SLURMD_NODENAME}; echo LOCAL $SLURMD_NODENAME $(cat "$d/.node-name")'
srun --mpi=pmix -N2 env | grep PMIX_RANK
EOF
  chmod 0755 "$dir/job.sh"
  # node-local directory template (%n = node name); each task resolves it with SLURMD_NODENAME
  local tmpl
  tmpl=$("$CLUSTER" env --base "$BASE" | sed -n 's/^LOCAL_TEMPLATE=//p')

  t0=$(now_ms)
  jid=$("$CLUSTER" exec --base "$BASE" --user "$USER_UNDER_TEST" -- \
          env FANSTORE_TEST_LOCAL_TMPL="$tmpl" \
          sbatch --parsable -N"$n" --chdir="$dir" -o "$dir/out.%j" -J smoke \
          --export=ALL "$dir/job.sh" 2>&1) || fail "sbatch failed: $jid"
  jid=${jid%%;*}
  [[ $jid =~ ^[0-9]+$ ]] || fail "sbatch printed no job id: $jid"
  st=$(wait_job "$jid")
  say "job $jid: $st in $(since "$t0")s"
  out=$dir/out.$jid
  [[ -f $out ]] || fail "no output file $out"
  echo "----- $out"; cat "$out"; echo "-----"
  [[ $st == COMPLETED ]] || fail "job $jid ended in state $st"
  ec=$(cl scontrol show job "$jid" | sed -n 's/.* ExitCode=\([^ ]*\).*/\1/p' | head -n1)
  [[ $ec == 0:0 ]] || fail "job $jid exit code $ec"

  # hostname lines: everything before SLURMD_NODENAME=
  hosts=$(sed '/^SLURMD_NODENAME=/,$d' "$out")
  nh=$(grep -c . <<<"$hosts" || true)
  ((nh == n)) || fail "expected $n hostname lines, got $nh"
  if [[ $mode == netns ]]; then
    [[ $(sort -u <<<"$hosts" | tr '\n' ' ') == "$(for ((i = 1; i <= n; i++)); do echo "node$i"; done | sort | tr '\n' ' ')" ]] \
      || fail "expected distinct hostnames node1..node$n, got: ${hosts//$'\n'/ }"
  else
    [[ $(sort -u <<<"$hosts") == "$(hostname)" ]] || fail "expected hostname $(hostname) on every node, got: ${hosts//$'\n'/ }"
  fi
  grep -qx 'SLURMD_NODENAME=node1' "$out" || fail "batch step not on node1 (SLURMD_NODENAME)"
  # node-local directory: each node sees its own .node-name
  local i
  for ((i = 1; i <= n; i++)); do
    grep -qx "LOCAL node$i node$i" "$out" || fail "node$i does not see its own node-local directory"
  done
  { [[ $(grep -c '^PMIX_RANK=' "$out") == 2 ]] && grep -qx 'PMIX_RANK=0' "$out" && grep -qx 'PMIX_RANK=1' "$out"; } \
    || fail "PMIx check: expected PMIX_RANK=0 and PMIX_RANK=1"
  say "$mode mode OK"
}

check_clean() {
  local p exe bad=()
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in
      */slurmctld*|*/slurmd*|*/slurmstepd*|*/munged*)
        st=$(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f1)
        [[ $st == Z || -z $st ]] || bad+=("${p#/proc/}:$exe") ;;
    esac
  done
  ((${#bad[@]} == 0)) || fail "processes left after stop: ${bad[*]}"
  [[ -z "$(ip netns list 2>/dev/null | grep -E '^fsl-' || true)" ]] || fail "netns left: $(ip netns list)"
  [[ -z "$(ip -o link show 2>/dev/null | grep -E ': fslv[0-9]' || true)" ]] || fail "veth left"
  [[ -z "$(findmnt -rn -o TARGET | grep -E "^$BASE(/|\$)|^/run/netns" || true)" ]] || fail "mounts left: $(findmnt -rn -o TARGET | grep -E "^$BASE|netns")"
  say "stop left no slurm/munge process, netns, veth or mount"
}

run_check ports 2
run_check netns 4
if [[ $KEEP == 1 ]]; then
  say "--keep: leaving the netns cluster running"
else
  t0=$(now_ms)
  "$CLUSTER" stop --base "$BASE" || fail "cluster stop failed"
  say "stop took $(since "$t0")s"
  check_clean
fi
say "PASS"
