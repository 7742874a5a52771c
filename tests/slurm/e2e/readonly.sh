#!/usr/bin/env bash
# slurm_readonly (2-node ports cluster): the job's tasks see the node's staged copy read-only, by
# every route that bypasses the interception library: the local path behind a descriptor
# (/proc/self/fd), a write, an unlink, a new file beside it and a chmod all get EROFS, in the
# batch script and in srun tasks on both nodes, while the agents still unpack and serve (every
# file reads back intact). The job asks for --fanstore-unpack=lazy: a file per file, made after
# the tasks start, where the disk would otherwise give an EROFS image; both agents' counters must
# say so.
#
# Usage: readonly.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds jd j st n
  ds=$(md5_dataset)
  jd=$(job_dir)
  expected_md5 "$PFS/tree" >"$jd/expected"
  cat >"$jd/bypass.py" <<'EOF'
import ctypes, errno, os, sys
# A file staged on this node: its descriptor's target is a path in the node-local copy, as the
# kernel tells it (the library shows the path under the mount: ask with a raw system call).
libc = ctypes.CDLL(None, use_errno=True)
def kernel_readlink(path):
    buf = ctypes.create_string_buffer(4096)
    n = libc.syscall(89, path.encode(), buf, len(buf))  # SYS_readlink
    return buf.raw[:n].decode() if n > 0 else ""
mount, out = sys.argv[1], sys.argv[2]
target = None
for root, _, names in os.walk(mount):
    for n in names:
        fd = os.open(os.path.join(root, n), os.O_RDONLY)
        t = kernel_readlink(f"/proc/self/fd/{fd}")
        os.close(fd)
        if t.startswith("/") and "/data/" in t:
            target = t
            break
    if target:
        break
def attempt(fn):
    try:
        fn()
        return "succeeded"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
res = [attempt(lambda: open(target, "r+b").close()),
       attempt(lambda: os.unlink(target)),
       attempt(lambda: open(os.path.join(os.path.dirname(target), "planted"), "w").close()),
       attempt(lambda: os.chmod(target, 0o600))] if target else ["no local file"]
open(out, "w").write(" ".join(res) + "\n")
EOF
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
/usr/bin/python3 "$JD/bypass.py" "$FANSTORE_MOUNT" "$JD/batch.$SLURM_JOB_ID"
srun -N2 --ntasks-per-node=1 bash -c '
  /usr/bin/python3 "$JD/bypass.py" "$FANSTORE_MOUNT" "$JD/task.$SLURMD_NODENAME"
  cd "$FANSTORE_MOUNT" && while read -r sum f; do md5sum "$f"; done < "$JD/expected" > "$JD/md5.$SLURMD_NODENAME"'
EOF
  chmod 0755 "$jd/job.sh"
  chown -R "$TUSER:" "$jd"
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" --fanstore-replicas=all --fanstore-unpack=lazy "$jd/job.sh" 2>&1) ||
    { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "job $j completed" || { bad "job $j ended $st"; job_output "$jd/out.$j"; }
  # The write comes first to the file's own mode (0400, EACCES; EROFS for root), the rest to the
  # read-only mount.
  local want="^(EACCES|EROFS) EROFS EROFS EROFS$"
  [[ $(cat "$jd/batch.$j" 2>/dev/null) =~ $want ]] && ok "batch script: write, unlink, create and chmod of the staged copy refused ($(cat "$jd/batch.$j"))" \
    || bad "batch script: $(cat "$jd/batch.$j" 2>&1) (want $want)"
  for n in node1 node2; do
    [[ $(cat "$jd/task.$n" 2>/dev/null) =~ $want ]] && ok "$n task: write, unlink, create and chmod of the staged copy refused" \
      || bad "$n task: $(cat "$jd/task.$n" 2>&1) (want $want)"
    diff -q "$jd/expected" "$jd/md5.$n" >/dev/null && ok "$n: every file reads back intact" \
      || bad "$n: md5 differ: $(diff "$jd/expected" "$jd/md5.$n" 2>&1 | head -5)"
  done
  local sf="$jd/fanstore-$j.stats"
  for _ in $(seq 150); do [[ -f $sf && $(wc -l <"$sf") -ge 2 ]] && break; sleep 0.2; done
  [[ $(grep -c '"mode":"lazy"' "$sf" 2>/dev/null) -eq 2 ]] && ok "--fanstore-unpack=lazy reached both agents: files unpacked lazily, no image" \
    || bad "--fanstore-unpack=lazy: the agents' counters say $(grep -o '"unpack":{[^}]*}' "$sf" 2>&1 | head -2)"
  grep -q "stays writable" "$BASE"/log/slurmd.*.log 2>/dev/null && bad "a node could not make the copy read-only: $(grep -h 'stays writable' "$BASE"/log/slurmd.*.log | head -2)" \
    || ok "no node reported a writable copy"
  check_clean "$j"
}

main
finish
