#!/usr/bin/env bash
# F7: a 1 GiB file is packed, verified, extracted, read with cat and staged (fanstore run,
# eager unpack) with a peak RSS of at most 64 MiB in each, as a stream; so is a 200 MiB
# incompressible one (stored raw after its sample fails to compress). Measured with
# /usr/bin/time (the peak of the command and of the children it waits for, the agent too).
# Usage: big_file.sh BUILD_DIR
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
F="$(cd "$1" && pwd)/bin/fanstore"
LIMIT_KB=$((64 * 1024))
T=$(mktmp)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
mkdir -p src/d
truncate -s 1G src/d/big.bin                   # sparse: quick to make, compresses to nothing
printf 'tail' | dd of=src/d/big.bin bs=1 seek=$((1024 * 1024 * 1024 - 4)) conv=notrunc status=none
head -c 200M /dev/urandom > src/rand.bin
printf 'small\n' > src/small.txt

# rss NAME COMMAND...: runs the command, checks its exit status and its peak RSS.
rss() {
  local name=$1; shift
  /usr/bin/time -f '%M' -o "rss.$name" "$@" >"out.$name" 2>"err.$name"
  local rc=$? kb
  kb=$(tail -1 "rss.$name")
  if [[ $rc -ne 0 ]]; then bad "$name: exit $rc: $(tail -3 "err.$name")"; return; fi
  if [[ $kb -le $LIMIT_KB ]]; then ok "$name: peak RSS $((kb / 1024)) MiB"; else bad "$name: peak RSS $((kb / 1024)) MiB > 64 MiB"; fi
}

echo "== 1 GiB and 200 MiB files in at most 64 MiB"
rss pack "$F" pack src ds.fs -q --no-sync
rss verify "$F" verify ds.fs -q
rss extract "$F" extract ds.fs out -q
check "extract restores the 1 GiB file" cmp out/d/big.bin src/d/big.bin
check "extract restores the random file" cmp out/rand.bin src/rand.bin
rm -rf out
rss cat "$F" cat ds.fs d/big.bin
check "cat gives the 1 GiB file" cmp out.cat src/d/big.bin
rm -f out.cat
mkdir local
# The agent's own peak too (VmHWM), read while it still runs.
cat > agent_peak.sh <<'SH'
for p in /proc/[0-9]*; do
  read -r -d '' a0 < "$p/cmdline" 2>/dev/null || continue
  [[ $a0 == */fanstore-agent ]] && tr '\0' ' ' < "$p/cmdline" | grep -q -- "--local-dir $1" &&
    awk '/VmHWM/ {print $2}' "$p/status"
done
true
SH
# shellcheck disable=SC2016  # the single-quoted script expands its own arguments.
rss stage "$F" run ds.fs --mount /fanstore/bigfile --local-dir "$T/local" --unpack eager -- \
  bash -c 'cmp /fanstore/bigfile/d/big.bin "$1" && cmp /fanstore/bigfile/rand.bin "$2" && bash "$3" "$4" > "$5"' \
  sh "$T/src/d/big.bin" "$T/src/rand.bin" "$T/agent_peak.sh" "$T/local" "$T/agent.kb"
kb=$(head -1 agent.kb)
if [[ -n $kb && $kb -le $LIMIT_KB ]]; then ok "stage: the agent's peak RSS $((kb / 1024)) MiB"
else bad "stage: the agent's peak RSS '${kb}' KiB (want <= 64 MiB)"; fi
# shellcheck disable=SC2016  # the inner bash runs the ls.
check "the staged copy is removed" bash -c '[ -z "$(ls -A local)" ]'
# Lazy: the shard copies are unpacked in the background after ready, large files as streams.
# shellcheck disable=SC2016  # the single-quoted script expands its own arguments.
rss stage-lazy "$F" run ds.fs --mount /fanstore/bigfile --local-dir "$T/local" --unpack lazy -- \
  bash -c 'for i in $(seq 600); do grep -q "\"unpacked\":true" "$(dirname "$FANSTORE_TABLE")/status.json" && break; sleep 0.1; done
    grep -q "\"unpacked\":true" "$(dirname "$FANSTORE_TABLE")/status.json" && cmp /fanstore/bigfile/d/big.bin "$1" && bash "$2" "$3" > "$4"' \
  sh "$T/src/d/big.bin" "$T/agent_peak.sh" "$T/local" "$T/agent.kb"
kb=$(head -1 agent.kb)
if [[ -n $kb && $kb -le $LIMIT_KB ]]; then ok "stage-lazy: the agent's peak RSS after the background unpack $((kb / 1024)) MiB"
else bad "stage-lazy: the agent's peak RSS '${kb}' KiB (want <= 64 MiB)"; fi
finish
