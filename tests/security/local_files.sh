#!/usr/bin/env bash
# Files and directories another user plants where FanStore writes, without Slurm: the job-end
# stats file (a predictable name in a possibly shared directory) and the directories an agent
# is given. Runs as root; the job user is fsalice, the other user fsbob.
# Usage: local_files.sh BUILD_DIR
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
B=$1
F="$B/bin/fanstore"
A="$B/bin/fanstore-agent"
if [[ $(id -u) -ne 0 ]]; then echo "local_files: needs root (test users)"; exit 1; fi
ensure_users fsalice fsbob
T=$(mktmp)
chmod 0755 "$T"
cleanup() {
  pkill -u fsalice -f "fanstore-agent --dataset $T/" 2>/dev/null
  sleep 0.3
  rm -rf "$T"
}
trap cleanup EXIT
cd "$T" || exit 1
mkdir -p src/d shared
for i in $(seq 1 20); do seq $((i * 100)) >"src/d/f$i"; done
"$F" pack src ds.fs -q
chmod -R a+rX ds.fs
chmod 1777 shared  # a directory both users can write, like a project's scratch space
as_alice() { runuser -u fsalice -- "$@"; }

# run_agent NAME ARGS...: an agent of fsalice that serves, then stops on SIGTERM.
run_agent() {
  local name=$1
  shift
  as_alice "$A" --dataset "$T/ds.fs" --mount /fanstore/lf --bootstrap single "$@" >"agent.$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q "ready" "agent.$name.log" 2>/dev/null && break; sleep 0.05; done
  pkill -TERM -u fsalice -f "fanstore-agent --dataset $T/ds.fs" 2>/dev/null
  wait "$pid"
}

echo "== the job-end stats file"
mkdir -m 0700 alice && chown fsalice alice
run_agent new --local-dir "$T/alice/l1" --run-dir "$T/alice/r1" --stats-out "$T/shared/new.stats"
check "a new stats file is private (0600, fsalice's)" test "$(stat -c '%a %U' shared/new.stats)" = "600 fsalice"
check "it holds the counters" grep -q '"opens"' shared/new.stats
runuser -u fsbob -- bash -c "echo planted > '$T/shared/planted.stats'; chmod 0666 '$T/shared/planted.stats'"
run_agent planted --local-dir "$T/alice/l2" --run-dir "$T/alice/r2" --stats-out "$T/shared/planted.stats"
check "a stats file planted by another user is not written to" test "$(cat shared/planted.stats)" = planted
check "the agent says why" grep -q "planted.stats is not a plain file of this user (owner uid $(id -u fsbob))" agent.planted.log
as_alice bash -c "echo secret > '$T/alice/secret'"
runuser -u fsbob -- ln -s "$T/alice/secret" "$T/shared/link.stats"
run_agent link --local-dir "$T/alice/l3" --run-dir "$T/alice/r3" --stats-out "$T/shared/link.stats"
check "a planted symlink is not followed" test "$(cat alice/secret)" = secret
runuser -u fsbob -- mkfifo "$T/shared/fifo.stats"
timeout 20 bash -c "$(declare -f run_agent as_alice); T=$T A=$A run_agent fifo --local-dir $T/alice/l4 --run-dir $T/alice/r4 --stats-out $T/shared/fifo.stats"
check "a planted FIFO does not hang the agent's exit" test $? -eq 0

echo "== directories given to the agent"
mkdir -m 0700 alice/existing && chown fsalice alice/existing
as_alice touch alice/existing/keep
run_agent existing --local-dir "$T/alice/l5" --run-dir "$T/alice/existing"
check "a run directory that existed before is not deleted (F5)" test -e alice/existing/keep
check "the agent removed its own files from it" test -z "$(find alice/existing -mindepth 1 -maxdepth 1 ! -name '.*' ! -name '*keep*')"

echo "== the way to a job directory (issue 30, findings 3 and 4)"
# local_dir=/tmp/%u where fsbob made /tmp/fsalice first: fsbob owns an ancestor, and could swap
# the job's directory below it for one of his own. The agent refuses it, naming the owner.
runuser -u fsbob -- mkdir -m 0777 "$T/shared/fsalice"
run_agent bobs --local-dir "$T/shared/fsalice/l6" --run-dir "$T/alice/r6"
check "a local directory below another user's directory is refused" test ! -e shared/fsalice/l6
check "the agent names the owner" grep -q "shared/fsalice belongs to uid $(id -u fsbob), neither root nor uid $(id -u fsalice)" agent.bobs.log
# A symlink above the last component (local_dir=/scratch/%u/%n with %n a link) is not followed,
# even to a directory of the user's own.
as_alice mkdir "$T/alice/real"
as_alice ln -s "$T/alice/real" "$T/alice/link"
run_agent link2 --local-dir "$T/alice/link/l7" --run-dir "$T/alice/r7"
check "a symlink in the middle of the local directory's path is not followed" test ! -e alice/real/l7
check "the agent names the symlink" grep -q "alice/link is a symlink" agent.link2.log

echo "== mode bits, for a user other than root"
# A file and a directory the dataset records as 0000: the job user reads neither, as on a
# read-only mount of the tree (root, who packed it, may).
mkdir -p modes/src/closed modes/src/open
echo secret >modes/src/none && echo x >modes/src/closed/f && echo y >modes/src/open/g
chmod 0000 modes/src/none modes/src/closed
"$F" pack -q modes/src modes/ds.fs && chmod -R a+rX modes/ds.fs && chmod 0755 modes
out=$(as_alice "$F" run "$T/modes/ds.fs" --local-dir "$T/alice" --mount /fanstore/modes -- bash -c \
  'cat /fanstore/modes/none; ls /fanstore/modes/closed; stat /fanstore/modes/closed/f /fanstore/modes/closed/nope
   cat /fanstore/modes/open/g; stat -c %a /fanstore/modes/closed' 2>&1)
check "a 0000 file cannot be read by the job user (EACCES)" grep -q "none: Permission denied" <<<"$out"
check "a 0000 directory cannot be listed by the job user (EACCES)" grep -q "closed': Permission denied" <<<"$out"
echo "$out" >modes/out.txt
check "nothing is found under a 0000 directory, existing or not (no search permission: EACCES)" \
  bash -c "grep -q \"closed/f': Permission denied\" modes/out.txt && grep -q \"closed/nope': Permission denied\" modes/out.txt"
check "other files still read, and the directory itself still stats" \
  bash -c "grep -qx y modes/out.txt && grep -qx 0 modes/out.txt"
finish
