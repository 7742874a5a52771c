#!/usr/bin/env bash
# The command scale.py runs inside `fanstore run`: three random passes over every file (the first
# ends the first epoch), stat and ENOENT loops, the agent's memory, and J2 with this mount.
# Usage: scale_session.sh OUT FSBENCH MOUNT LIST ENOENT_OPENS (FSBENCH "-": no reads)
set -euo pipefail
out=$1 fsbench=$2 mount=$3 list=$4 enoent=$5
now() { date +%s.%N; }
now >"$out/t_cmd_start"
rundir=$(dirname "$FANSTORE_TABLE")
if [[ $fsbench != - ]]; then
  "$fsbench" read "$mount" "$list" 1 >"$out/pass1.json"
  now >"$out/t_pass1_end"
  # The agent's counters (its local socket, proto.h: magic, op 3 = stats, status, length).
  /usr/bin/python3 - "$FANSTORE_SOCKET" >"$out/stats_after_pass1.json" <<'PYEOF'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(struct.pack("=IIiI", 0x46534c31, 3, 0, 0))
data = b""
while chunk := s.recv(1 << 20):
    data += chunk
    if len(data) >= 16 and len(data) >= 16 + struct.unpack("=IIiI", data[:16])[3]:
        break
print(data[16:].decode())
PYEOF
  "$fsbench" read "$mount" "$list" 1 >"$out/pass2.json"
  "$fsbench" read "$mount" "$list" 1 >"$out/pass3.json"
  "$fsbench" stat "$mount" "$list" 1 >"$out/stat.json"
  "$fsbench" enoent "$mount" "$list" "$enoent" >"$out/enoent.json"
fi
pid=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$rundir/status.json")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
shmem=$(awk '/^RssShmem/ {print $2}' "/proc/$pid/status")
table=$(stat -c %s "$FANSTORE_TABLE")
echo "{\"pid\": $pid, \"vm_hwm_kib\": $hwm, \"vm_rss_kib\": $rss, \"rss_shmem_kib\": $shmem, \"table_bytes\": $table}" >"$out/agent.json"
j2() {
  local name=$1
  shift
  "$@" hyperfine -N --warmup 20 --runs 100 --export-json "$out/hf.json" /bin/true >/dev/null
  /usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["results"][0]; print(json.dumps({"median_ms": r["median"] * 1e3}))' \
    "$out/hf.json" >"$out/$name.json"
}
j2 j2_plain env -u LD_PRELOAD
j2 j2_preload env
now >"$out/t_cmd_end"
