#!/usr/bin/env bash
# The peer data service without Slurm: two agents (mpirun as the PMIx server) split a dataset
# (replicas 1); a client reading through one agent gets every file, from its peer, then from
# the cache, then, with the peer killed, from the dataset directory. Another user gets nothing
# from an agent's port. A frame corrupted on the "parallel file system" gives EIO, never bad
# bytes. Runs as root (it switches to the test users). Usage: peer_test.sh BUILD_DIR
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
B=$1
F="$B/bin/fanstore"
PY=/usr/bin/python3
if [[ $(id -u) -ne 0 ]]; then echo "peer_test: needs root (test users, munge)"; exit 1; fi
ensure_munge
ensure_users fsalice fsbob
T=$(mktmp); chmod 0755 "$T"
RD=/dev/shm/fanstore-peertest.$$
RD0=$RD
M=/fanstore/peers
cleanup() {
  [[ -n "${MPI_PID:-}" ]] && kill "$MPI_PID" 2>/dev/null
  pkill -u fsalice -f "fanstore-agent --dataset $T/ds.fs" 2>/dev/null
  sleep 0.5; rm -rf "$T" "$RD0".*
}
trap cleanup EXIT
cd "$T" || exit 1

mkdir -p src/many/x src/many/y
for i in $(seq 1 120); do head -c $((16000 + i * 37)) /dev/urandom > "src/many/x/f$i.bin"; done
for i in $(seq 1 80); do seq $((i * 300)) > "src/many/y/t$i.txt"; done
# Two files larger than the cache (100 KiB) and than one transfer piece (1 MiB): pack puts them
# in the first two shards, one per agent, so each agent fetches one of them from the other (into
# a memfd, streamed) and, once the peer is dead, from the dataset (a streamed zstd frame).
head -c $((3 << 20)) /dev/urandom > src/big.bin
seq 1 400000 > src/big.txt
"$F" pack src ds.fs -q --shard-size 256K
chmod -R a+rX "$T"
mkdir local && chown fsalice local
shard_files=(ds.fs/shard-*.fsd)
check "dataset has many shards" test "${#shard_files[@]}" -ge 8

# --enable-recovery: mpirun must not take agent 0 down when the test kills agent 1.
# Lazy unpack with the background pass held back: the holders unpack what they serve to the
# peer when it is first asked for.
runuser -u fsalice -- env FANSTORE_TEST_UNPACK_DELAY_MS=600000 mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 2 "$B/bin/fanstore-agent" --dataset "$T/ds.fs" --local-dir "$T/local/ld%r" \
  --run-dir "$RD.%r" --mount $M --replicas 1 --cache-size 100K --unpack lazy --quiet >agents.log 2>&1 &
MPI_PID=$!
ready() { grep -q '"state":"ready"' "$RD.$1/status.json" 2>/dev/null; }
for _ in $(seq 100); do ready 0 && ready 1 && break; sleep 0.1; done
check "both agents are ready" bash -c "grep -q ready $RD.0/status.json && grep -q ready $RD.1/status.json" || { cat agents.log; exit 1; }
ASAN_RT=$(asan_runtime "$B/lib/libfanstore_preload.so")
client() {  # client RANK CMD...: a process of the job user on the "node" of agent RANK
  local r=$1; shift
  runuser -u fsalice -- env LD_PRELOAD="$ASAN_RT $B/lib/libfanstore_preload.so" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 FANSTORE_MOUNT=$M \
    FANSTORE_TABLE="$RD.$r/table" FANSTORE_SOCKET="$RD.$r/agent.sock" "$@"
}
stats() {  # stats RANK: the agent's JSON counters over its socket
  runuser -u fsalice -- $PY -c "
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.connect('$RD.$1/agent.sock')
s.send(struct.pack('<IIiI', 0x46534c31, 3, 0, 0))
m, o, st, n = struct.unpack('<IIiI', s.recv(16)); d = b''
while len(d) < n: d += s.recv(n - len(d))
print(d.decode())"
}
field() { $PY -c "import json,sys; d=json.loads(sys.argv[1]); print(eval('d' + sys.argv[2]))" "$1" "$2"; }
hashes() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs md5sum); }

echo "== split placement"
s0=$(stats 0); s1=$(stats 1)
total=$(du -cb ds.fs/shard-*.fsd | tail -1 | cut -f1)
r0=$(field "$s0" "['bytes_read_from_source']"); r1=$(field "$s1" "['bytes_read_from_source']")
check "each agent read only its share from the dataset ($r0 + $r1 of $total bytes)" \
  bash -c "[[ $((r0 + r1)) -eq $total && $r0 -lt $((total * 3 / 4)) && $r1 -lt $((total * 3 / 4)) ]]"
check "the metadata exchange gave both agents the whole namespace" \
  diff <(client 0 bash -c "cd $M && find . | sort") <(client 1 bash -c "cd $M && find . | sort")

echo "== reads through agent 0"
check "every file matches the source (local and fetched from the peer)" diff <(hashes src) <(client 0 bash -c "$(declare -f hashes); hashes $M")
s0=$(stats 0)
check "remote opens were served by the peer ($(field "$s0" "['opens']"))" test "$(field "$s0" "['opens']['remote']")" -gt 0
check "every file matches the source through agent 1 too" diff <(hashes src) <(client 1 bash -c "$(declare -f hashes); hashes $M")
check "no fallback while the peer is up" test "$(field "$s0" "['opens']['fallback']")" -eq 0
s1=$(stats 1)
check "agent 1 unpacked the files it served on first request ($(field "$s1" "['unpack']"))" \
  test "$(field "$s1" "['unpack']['on_demand']")" -gt 0 -a "$(field "$s1" "['unpack']['mode']")" = lazy
# Files of rank 1's shards: what agent 0 must fetch.
rank1_files() {
  for s in $(field "$(cat "$RD.1/status.json")" "['shards']" | tr -d '[],'); do
    "$F" ls -w ds.fs | awk -v f="$(printf 'shard-%05d.fsd' "$s")" '$2 == f'
  done | sort
}
remote_file=$(rank1_files | awk '{print $1}' | tail -1)
client 0 cat "$M/$remote_file" >/dev/null
s0a=$(stats 0)
client 0 cat "$M/$remote_file" >/dev/null
s0b=$(stats 0)
check "a repeat read comes from the cache, not the peer" \
  test "$(field "$s0b" "['opens']['cached']")" -gt "$(field "$s0a" "['opens']['cached']")" -a "$(field "$s0b" "['opens']['remote']")" -eq "$(field "$s0a" "['opens']['remote']")"
check "opens of staged files are counted too" test "$(field "$s0b" "['opens']['local']")" -gt 0
check "the cache stays within its bound (100 KiB)" test "$(field "$s0b" "['cache']['used']")" -le 102400
check "the cache evicts least recently used files" test "$(field "$s0b" "['cache']['evictions']")" -gt 0

echo "== another user gets nothing"
ep=$(field "$(cat $RD.1/status.json)" "['endpoint']")
cp "$HERE/../peer_probe.py" attack.py
out=$(runuser -u fsbob -- $PY attack.py "$ep" 1 2>&1)
indent '  fsbob: ' <<<"$out"
check "the agent listens on one address, not every interface ($ep)" bash -c "[[ '${ep%:*}' != 0.0.0.0 ]] && ! ss -Htln | grep -q '0.0.0.0:${ep##*:} '"
check "fsbob cannot decode the agent's proof (its credential is for the job's uid only)" grep -q "decode the server's proof: exit [1-9]" <<<"$out"
check "fsbob's valid MUNGE credential is refused (EACCES) and nothing follows" grep -q "own credential: status 13 bytes after 0" <<<"$out"
check "a request without authentication gets no data" grep -q "no credential: bytes 0" <<<"$out"
check "a forged credential is refused" grep -qE "forged credential: status 13 bytes after 0$" <<<"$out"
check "a 4 GiB length is dropped at once (F2)" grep -q "4 GiB length: bytes 0" <<<"$out"
check "slow connections are closed at their deadline (F3, F10)" grep -qE "slow connections: opened 200 closed by the agent 200" <<<"$out"
check "the agent counted the refusals" test "$(field "$(stats 1)" "['peers']['refused_connections']")" -ge 3
check "the attacked agent still serves: every file reads through agent 0" diff <(hashes src) <(client 0 bash -c "$(declare -f hashes); hashes $M")
expect_fail "fsbob cannot reach the agent's socket or table" 1 "Permission denied" runuser -u fsbob -- cat "$RD.0/table"

echo "== a stalled peer"
# SIGSTOP: agent 1 holds its connections but answers nothing. Agent 0 gives up on it after 3 s
# without progress and reads its files from the dataset, at most 4 at a time, so that 16
# readers at once do not become 16 streams on the parallel file system.
kill -STOP "$(field "$(cat $RD.1/status.json)" "['pid']")"
check "with the peer stalled, 16 parallel readers still read every file correctly" \
  diff <(hashes src) <(client 0 bash -c "cd $M && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -n 4 -P 16 md5sum | LC_ALL=C sort -k2")
kill -CONT "$(field "$(cat $RD.1/status.json)" "['pid']")"
s0=$(stats 0)
check "reads from the dataset stayed within their bound ($(field "$s0" "['source_reads']"))" \
  test "$(field "$s0" "['source_reads']['in_flight_peak']")" -le 4 -a "$(field "$s0" "['source_reads']['in_flight_peak']")" -ge 1

echo "== a dead peer"
agent1=$(field "$(cat $RD.1/status.json)" "['pid']")
# The first file of rank 1's shards: corrupt its frame on the "parallel file system".
victim=$(rank1_files | grep '^many/x/' | head -1)
read -r vpath vshard voff vlen _ <<<"$victim"
kill -9 "$agent1"
sleep 0.3
check "with the peer dead, every other file still reads correctly (from the dataset)" \
  diff <(hashes src | grep -v "$vpath") <(client 0 bash -c "$(declare -f hashes); hashes $M" | grep -v "$vpath")
s0=$(stats 0)
check "those reads were fallbacks ($(field "$s0" "['opens']"))" test "$(field "$s0" "['opens']['fallback']")" -gt 0
# F1: fsbob takes over the dead agent's endpoint, once agent 0's down window for it (10 s after
# the last failure, agent/peer_io.h kDownFor) is over, so that agent 0 dials it again.
# Agent 0 dials it, gets fsbob's credential as the proof, refuses it, and sends none of its own.
sleep 10.5
runuser -u fsbob -- $PY attack.py --listen "$ep" 8 >fake.out 2>&1 &
fake=$!
for _ in $(seq 300); do grep -q "bound" fake.out && break; sleep 0.2; done
check "with an impostor on the dead agent's endpoint, every file still reads correctly" \
  diff <(hashes src | grep -v "$vpath") <(client 0 bash -c "$(declare -f hashes); hashes $M" | grep -v "$vpath")
wait "$fake"
sed 's/^/  fsbob: /' fake.out
check "agent 0 dialled the impostor and sent it no credential (F1)" grep -qE "hellos [1-9][0-9]* credentials received 0$" fake.out
printf '\xff\xfe' | dd of="ds.fs/$vshard" bs=1 seek=$((voff + vlen / 2)) conv=notrunc status=none
out=$(client 0 $PY -c "
import errno
try:
    open('$M/$vpath', 'rb').read(); print('read succeeded')
except OSError as e:
    print('error', errno.errorcode[e.errno])" 2>&1)
check "a frame corrupted on the dataset gives EIO, never bad bytes ($vpath)" grep -q "error EIO" <<<"$out"

echo "== prefetch, 3 streams at once, of shards with a file larger than one transfer piece (4 MiB)"
kill "$MPI_PID" 2>/dev/null; wait "$MPI_PID" 2>/dev/null; MPI_PID=
mkdir -p src2/a src2/b && head -c $((10 << 20)) /dev/urandom > src2/a/big && seq 1 3000 > src2/a/small
for i in $(seq 12); do head -c $((1 << 20)) /dev/urandom > "src2/b/f$i"; done
"$F" pack src2 ds2.fs -q --shard-size 2M && chmod -R a+rX ds2.fs
RD=$RD.pf
runuser -u fsalice -- mpirun -np 2 "$B/bin/fanstore-agent" --dataset "$T/ds2.fs" --local-dir "$T/local/pf%r" \
  --run-dir "$RD.%r" --mount $M --replicas 1 --prefetch-streams 3 --quiet >>agents.log 2>&1 &
MPI_PID=$!
for _ in $(seq 100); do ready 0 && ready 1 && break; sleep 0.1; done
big_rank=$(for r in 0 1; do [[ -f $T/local/pf$r/data/a/big ]] && echo $r; done)
other=$((1 - ${big_rank:-0}))
for _ in $(seq 100); do [[ $(field "$(stats $other)" "['prefetch']['bytes']") -ge $((10 << 20)) ]] && break; sleep 0.1; done
check "agent $other prefetched the 10 MiB file held by agent $big_rank ($(field "$(stats $other)" "['prefetch']"))" \
  test "$(field "$(stats $other)" "['prefetch']['bytes']")" -ge $((10 << 20))
got=$(client $other cat $M/a/big | md5sum)
check "it reads back identical" test "$got" == "$(md5sum < src2/a/big)"
check "that open was a cached one ($(field "$(stats $other)" "['opens']"))" test "$(field "$(stats $other)" "['opens']['cached']")" -ge 1
remote_shards=$($PY -c "import json; print(len(json.load(open('$RD.$big_rank/status.json'))['shards']))")
for _ in $(seq 100); do [[ $(field "$(stats $other)" "['prefetch']['shards']") -ge $remote_shards ]] && break; sleep 0.1; done
check "agent $other streamed each of the $remote_shards shards of agent $big_rank once ($(field "$(stats $other)" "['prefetch']"))" \
  test "$(field "$(stats $other)" "['prefetch']['shards']")" -eq "$remote_shards"
got=$(client $other bash -c "cd $M && find . -type f | LC_ALL=C sort | xargs md5sum")
check "every file reads back identical through agent $other" test "$got" == "$(hashes src2)"
echo "== one agent's stage-in fails after the indexes are exchanged"
# The frame corrupted above is in a shard of rank 1: its copy (lazy) or unpack (eager) fails
# while rank 0 stages fine. The second round of the exchange must fail both, naming the cause.
for mode in lazy eager; do
  RD=$RD0.fail$mode
  runuser -u fsalice -- mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 2 "$B/bin/fanstore-agent" \
    --dataset "$T/ds.fs" --local-dir "$T/local/fail$mode%r" --run-dir "$RD.%r" --mount $M --replicas 1 --unpack $mode \
    --quiet >>agents.log 2>&1
  st0=$(cat "$RD.0/status.json" 2>/dev/null); st1=$(cat "$RD.1/status.json" 2>/dev/null)
  check "$mode: rank 1 failed, naming the damaged shard ($(field "$st1" "['error']" | head -c 160))" \
    bash -c "grep -q '\"state\":\"failed\"' <<<'$st1' && grep -q '$vshard' <<<'$st1'"
  check "$mode: rank 0 staged fine but failed too, naming rank 1 and the cause" \
    bash -c "grep -q '\"state\":\"failed\"' <<<'$st0' && grep -q 'agent of rank 1 failed' <<<'$st0' && grep -q '$vshard' <<<'$st0'"
  check "$mode: neither left a local directory or a table behind" \
    bash -c "! ls -d $T/local/fail$mode* $RD.0/table $RD.1/table $RD.0/counters 2>/dev/null"
done
[[ $FAILURES -eq 0 ]] || { echo "--- agents' log"; cat agents.log; }
finish
