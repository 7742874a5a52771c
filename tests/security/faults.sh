#!/usr/bin/env bash
# The fault matrix without Slurm: an agent, or its peer, killed with SIGKILL while it stages
# and while it exchanges metadata (one agent under `fanstore run`, two under mpirun), and a
# truncated shard. Each fault must end with the job's command never started and a message
# that names the cause, and nothing left on the node. The other cells of the matrix (killed
# while serving, a stalled peer, a full disk, no inodes, a corrupt frame) are in serve_test
# and peer_test; docs/security.md lists them all. Runs as root (it switches to the test user).
# Usage: faults.sh BUILD_DIR
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
B=$1
F="$B/bin/fanstore"
if [[ $(id -u) -ne 0 ]]; then echo "faults: needs root (test users)"; exit 1; fi
ensure_munge
ensure_users fsalice
T=$(mktmp)
chmod 0755 "$T"
M=/fanstore/faults
MPI_PID=
cleanup() {
  [[ -n $MPI_PID ]] && kill "$MPI_PID" 2>/dev/null
  pkill -9 -u fsalice -f "fanstore-agent --dataset $T/" 2>/dev/null
  sleep 0.3
  rm -rf "$T" /dev/shm/fanstore-faults.*
}
trap cleanup EXIT
cd "$T" || exit 1
mkdir -p src/d
for i in $(seq 1 300); do head -c $((3000 + i * 11)) /dev/urandom >"src/d/f$i.bin"; done
"$F" pack src ds.fs -q --shard-size 256K
chmod -R a+rX ds.fs
mkdir local && chown fsalice local
as_user() { runuser -u fsalice -- "$@"; }
left_behind() {  # what a run left in its directories: must be nothing
  find local /dev/shm -maxdepth 1 -user fsalice -name 'fanstore*' 2>/dev/null
  find local -mindepth 1 2>/dev/null
}
agent_pid() {  # agent_pid [RANK]: the pid of the agent (of that PMIx rank)
  local p
  for p in $(pgrep -u fsalice -f "fanstore-agent --dataset $T/ds.fs"); do
    [[ -z ${1:-} ]] || tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "PMIX_RANK=$1" || continue
    echo "$p"
    return
  done
}
wait_log() {  # wait_log FILE PATTERN
  for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}

echo "== one agent (fanstore run), killed with SIGKILL"
for phase in staging exchange; do
  rm -f started
  as_user env FANSTORE_TEST_PAUSE=$phase:20000 "$F" run ds.fs --local-dir "$T/local" --mount $M \
    -- touch "$T/started" >run.$phase.log 2>&1 &
  run=$!
  wait_log run.$phase.log "test pause: $phase" || bad "$phase: the agent never reached the pause"
  kill -9 "$(agent_pid)"
  wait "$run"
  rc=$?
  check "killed while $phase: fanstore run fails (exit $rc) and COMMAND never starts" \
    bash -c "[[ $rc -ne 0 && ! -e started ]]"
  check "killed while $phase: the message names the cause ($(tail -1 run.$phase.log))" \
    grep -qE "agent .*(killed|signal 9|SIGKILL)" run.$phase.log
  check "killed while $phase: nothing left behind" test -z "$(left_behind)"
done

echo "== two agents (mpirun), one killed with SIGKILL"
for phase in staging exchange; do
  as_user env FANSTORE_TEST_PAUSE=$phase:20000 mpirun --mca orte_abort_on_non_zero_status 1 -np 2 \
    "$B/bin/fanstore-agent" --dataset "$T/ds.fs" --local-dir "$T/local/ld%r" \
    --run-dir "/dev/shm/fanstore-faults.$$.%r" --mount $M --replicas 1 >mpi.$phase.log 2>&1 &
  MPI_PID=$!
  for _ in $(seq 200); do [[ $(grep -c "test pause: $phase" mpi.$phase.log) -ge 2 ]] && break; sleep 0.05; done
  if [[ $phase == exchange ]]; then  # what the plugin quotes when the fence never completes
    st="/dev/shm/fanstore-faults.$$.0/status.json"
    for _ in $(seq 40); do grep -qs '"exchange_waiting_seconds"' "$st" && break; sleep 0.1; done
    check "held in the exchange: its status.json says how long" grep -qs '"exchange_waiting_seconds"' "$st"
  fi
  kill -9 "$(agent_pid 1)"
  for _ in $(seq 300); do kill -0 "$MPI_PID" 2>/dev/null || break; sleep 0.1; done
  check "peer killed while $phase: the agents stop (mpirun ended)" bash -c "! kill -0 $MPI_PID 2>/dev/null"
  wait "$MPI_PID" 2>/dev/null
  MPI_PID=
  check "peer killed while $phase: the launcher names the dead agent" grep -qiE "signal 9|killed" mpi.$phase.log
  check "peer killed while $phase: the surviving agent removed its directories" \
    test -z "$(ls -d "$T/local/ld0" "/dev/shm/fanstore-faults.$$.0" 2>/dev/null)"
  # The killed agent could not clean up; the next run on the node must not trip over it.
  rm -rf "$T/local/ld1" "/dev/shm/fanstore-faults.$$".*
done

echo "== fanstore run and its agent killed with SIGKILL while serving (F15)"
as_user "$F" run ds.fs --local-dir "$T/local" --mount $M -- sleep 60 >run.kill.log 2>&1 &
run=$!
for _ in $(seq 200); do grep -qs '"state":"ready"' "/dev/shm/fanstore.$(id -u fsalice)".run.*/status.json && break; sleep 0.05; done
agent=$(agent_pid)
runpid=$(pgrep -u fsalice -f "fanstore run ds.fs --local-dir $T/local")
# Its command, orphaned by the kill, is ended by its pid: other tests may run sleeps as fsalice.
for _ in $(seq 100); do sleeper=$(pgrep -P "$runpid" -x sleep) && break; sleep 0.05; done
kill -9 "$runpid" "$agent"
wait "$run" 2>/dev/null
[[ -n $sleeper ]] && kill -9 "$sleeper"
left=$(left_behind | wc -l)
check "the killed run left its directories behind ($left entries)" test "$left" -gt 0
out=$(as_user "$F" run ds.fs --local-dir "$T/local" --mount $M -- true 2>&1)
check "the next run removes them, and says so ($(grep -m1 'killed run' <<<"$out"))" \
  bash -c "grep -q 'removed what a killed run left' <<<'$out' && [[ -z \"\$(find local /dev/shm -maxdepth 1 -user fsalice -name 'fanstore*' 2>/dev/null; find local -mindepth 1 2>/dev/null)\" ]]"

echo "== a damaged file whose name is not UTF-8"
# The agent reports the file by name in status.json (JSON): a name that is not UTF-8 once ended
# the agent with an uncaught exception instead of the message.
mkdir -p bad8/d && head -c 5000 /dev/urandom >"bad8/d/$(printf 'caf\xe9-\xff.bin')"
"$F" pack bad8 bad8.fs -q && chmod -R a+rX bad8.fs
read -r _ bshard boff blen _ <<<"$("$F" ls -w bad8.fs | grep -a caf)"
printf '\xff\xfe\xfd' | dd of="bad8.fs/$bshard" bs=1 seek=$((boff + blen / 2)) conv=notrunc status=none
out=$(as_user "$F" run "$T/bad8.fs" --local-dir "$T/local" --mount $M -- true 2>&1)
rc=$?
check "non-UTF-8 name: the run fails (exit $rc) with the agent's message, not a crash" \
  bash -c "[[ $rc -eq 1 ]] && grep -q 'checksum mismatch' <<<'$(tr -d "'" <<<"$out")' && ! grep -qi 'terminate\|abort' <<<'$(tr -d "'" <<<"$out")'"
check "non-UTF-8 name: nothing left behind" test -z "$(left_behind)"

echo "== a truncated shard"
cp -a ds.fs trunc.fs
shard_files=(trunc.fs/shard-*.fsd)
victim=${shard_files[1]}
truncate -s $(($(stat -c %s "$victim") - 100)) "$victim"
chmod -R a+rX trunc.fs
rm -f started
out=$(as_user "$F" run "$T/trunc.fs" --local-dir "$T/local" --mount $M -- touch "$T/started" 2>&1)
rc=$?
check "truncated shard: fanstore run fails (exit $rc) and COMMAND never starts" bash -c "[[ $rc -ne 0 && ! -e started ]]"
check "truncated shard: the message names the shard ($(tail -1 <<<"$out"))" grep -q "$(basename "$victim")" <<<"$out"
check "truncated shard: nothing left behind" test -z "$(left_behind)"
finish
