#!/usr/bin/env bash
# slurm_output (2-node ports cluster): --fanstore-output (issue 29, checkpoints).
#  1. sbatch -N2 --fanstore=DS --fanstore-output=OUT: tasks on both nodes read the dataset and
#     write to $FANSTORE_OUTPUT (a checkpoint written to a temporary name and renamed into place,
#     as torch.save + os.replace do, and one name both nodes write); `fanstore stats` shows the
#     drain. After the job: every file is under OUT with the bytes written, the temporary names
#     never got there, the name both nodes wrote is kept twice (NAME.node-NODE), the manifest
#     lists all, the files are the user's and nobody else's to write; the job's output and
#     slurmd's log say what drained; nothing is left on the nodes.
#  2. An output-only job (no dataset) whose OUT stops being writable, with
#     --fanstore-drain-timeout=3: the job still ends, its output names the file that did not
#     drain, slurmd's log too, and the file stays on the node, where the epilog keeps it.
#  3. Bad option values are refused at submission: a relative OUT, a drain timeout above the
#     site's bound, an OUT whose parent does not exist.
#
# Usage: output.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck disable=SC2016  # $FANSTORE_OUTPUT and friends are expanded by the job's shells
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The output directory of job J on node N, as the plugin names it (local_dir=<nodes>/%n/local).
node_output() { echo "$BASE/nodes/$2/local/fanstore.$(uid_of).$1.output"; }

both_nodes_write() {
  local ds=$1 jd=$2 out=$3 j st n
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
srun -N2 --ntasks-per-node=1 /usr/bin/python3 - <<'PY'
import hashlib, os, subprocess
node, out = os.environ["SLURMD_NODENAME"], os.environ["FANSTORE_OUTPUT"]
data = os.urandom(3 << 20) + open(os.path.join(os.environ["FANSTORE_MOUNT"], "a/hello.txt"), "rb").read()
tmp = os.path.join(out, f"ckpt-{node}.pt.tmp")
with open(tmp, "wb") as f:              # torch.save(state, tmp)
    f.write(data)
os.replace(tmp, os.path.join(out, f"ckpt-{node}.pt"))
os.makedirs(os.path.join(out, "logs"), exist_ok=True)
with open(os.path.join(out, "logs", "shared.log"), "w") as f:
    f.write(f"written on {node}\n")
with open(os.path.join(os.environ["JD"], f"sums.{node}"), "w") as f:
    f.write(f"{hashlib.md5(data).hexdigest()} ckpt-{node}.pt\n")
print(node, "output dir", out, "mode", oct(os.stat(out).st_mode & 0o777))
PY
sleep 2   # the drain runs meanwhile; the stats show it
fanstore stats > "$JD/stats.txt" 2>&1
EOF
  chmod 0755 "$jd/job.sh"
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" \
        -o "$jd/out.%j" --export=ALL --fanstore="$ds" --fanstore-output="$out" "$jd/job.sh" 2>&1) \
    || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j with --fanstore-output completed" || bad "job $j ended $st"
  for n in node1 node2; do
    read -r sum name <"$jd/sums.$n" 2>/dev/null || { bad "$n: the task wrote no checksum"; continue; }
    [[ -f $out/$name && $(md5sum <"$out/$name" | cut -d' ' -f1) == "$sum" ]] \
      && ok "$n: $name is under OUT with the bytes written" || bad "$n: $out/$name missing or wrong"
    [[ $(stat -c %U "$out/$name" 2>/dev/null) == "$TUSER" && $(stat -c %a "$out/$name") != *[2367] ]] \
      && ok "$n: $name is the job user's, writable by nobody else ($(stat -c %a "$out/$name"))" \
      || bad "$n: $name owner or mode: $(stat -c '%U %a' "$out/$name" 2>&1)"
  done
  local tmps
  tmps=$(find "$out" -name '*.tmp' -o -name '.*.fanstore-*' 2>/dev/null)
  [[ -z $tmps ]] && ok "no temporary name reached OUT" || bad "temporary names in OUT: $tmps"
  local copies
  copies=$(find "$out/logs" -name 'shared.log*' 2>/dev/null | wc -l)
  [[ $copies -eq 2 && $(cat "$out"/logs/shared.log* | sort | tr '\n' ' ') == "written on node1 written on node2 " ]] \
    && ok "the name both nodes wrote is kept twice: $(find "$out/logs" -type f -printf '%f ')" \
    || bad "logs/shared.log from two nodes: $(ls -la "$out/logs" 2>&1)"
  local listed
  listed=$("$PY" -c 'import json, sys; m = json.load(open(sys.argv[1])); print(len(m["files"]), len(m.get("not_drained", [])))' \
    "$out/.fanstore-output.json" 2>&1)
  [[ $listed == "4 0" ]] && ok "the manifest lists the 4 files, none undrained" || bad "manifest: $listed"
  grep -q '^  output: .* drained to '"$out" "$jd/stats.txt" 2>/dev/null \
    && ok "fanstore stats in the job shows the drain: $(grep '^  output:' "$jd/stats.txt" | head -1 | sed 's/^ *//')" \
    || bad "fanstore stats shows no drain: $(cat "$jd/stats.txt" 2>&1)"
  [[ $(grep -c "^fanstore: fanstore-agent\[node[12]\]: output: .* drained to $out" "$jd/out.$j") -eq 2 ]] \
    && ok "the job's output says what drained on each node" || bad "the job's output has no drain report"
  grep -q "task_exit: job $j: agent report: fanstore-agent\[node[12]\]: output:" "$BASE"/log/slurmd.*.log \
    && ok "slurmd's log has the drain report" || bad "slurmd's log has no drain report of job $j"
  check_clean "$j"
  for n in node1 node2; do
    [[ ! -e $(node_output "$j" $n) ]] || bad "$n: $(node_output "$j" $n) left behind"
  done
}

undrained_is_named_and_kept() {
  local jd=$1 out=$2 j st kept
  mkdir -p "$out" && chown "$TUSER:" "$out"
  cat >"$jd/stuck.sh" <<'EOF'
#!/bin/bash
[[ -z ${FANSTORE_MOUNT:-} ]] || { echo "a dataset mount in an output-only job"; exit 1; }
chmod 0500 "$OUT"                      # the parallel file system refuses writes from now on
echo checkpoint > "$FANSTORE_OUTPUT/ckpt.pt"
EOF
  chmod 0755 "$jd/stuck.sh"
  j=$(cd "$jd" && asu env OUT="$out" sbatch --parsable -N1 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore-output="$out" --fanstore-drain-timeout=3 "$jd/stuck.sh" 2>&1) \
    || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  chmod 0755 "$out"
  [[ $st == COMPLETED ]] && ok "output-only job $j completed" || bad "job $j ended $st"
  grep -q "^fanstore: fanstore-agent\[node1\]: error: output:   ckpt.pt: " "$jd/out.$j" \
    && ok "the job's output names the file that did not drain" || bad "the job's output does not name ckpt.pt"
  grep -q "task_exit: job $j: agent report: fanstore-agent\[node1\]: error: output: 1 file(s) did not reach" "$BASE"/log/slurmd.*.log \
    && ok "slurmd's log says what did not drain" || bad "slurmd's log does not say what did not drain"
  kept=$(node_output "$j" node1)
  for _ in $(seq 100); do ! asroot squeue -h -j "$j" -t COMPLETING 2>/dev/null | grep -q . && break; sleep 0.2; done
  [[ $(cat "$kept/ckpt.pt" 2>/dev/null) == checkpoint && $(stat -c '%U %a' "$kept") == "$TUSER 700" ]] \
    && ok "the undrained file stays on the node in $kept (the user's, 0700)" || bad "$kept/ckpt.pt is not there: $(ls -la "$kept" 2>&1)"
  grep -q "kept $kept: output of job $j that did not drain" "$BASE"/log/slurmd.*.log \
    && ok "the epilog kept it and said so in slurmd's log" || bad "no epilog line about $kept"
  [[ ! -e $out/ckpt.pt ]] && ok "nothing half-made under OUT" || bad "$out/ckpt.pt exists"
  rm -rf "$kept"
}

refused_at_submission() {
  local jd=$1
  printf '#!/bin/bash\ntrue\n' >"$jd/true.sh"
  chmod 0755 "$jd/true.sh"
  expect_fail "relative --fanstore-output refused" 1 "--fanstore-output=run42: must be a clean absolute path" \
    asu sbatch -N1 -o /dev/null --fanstore-output=run42 "$jd/true.sh"
  expect_fail "a drain timeout above the site's bound refused" 1 "--fanstore-drain-timeout=100000: must be seconds from 0 to 300" \
    asu sbatch -N1 -o /dev/null --fanstore-output="$PFS/out-ok" --fanstore-drain-timeout=100000 "$jd/true.sh"
  expect_fail "an output directory without a parent refused" 1 "its parent $PFS/nowhere does not exist" \
    asu sbatch -N1 -o /dev/null --fanstore-output="$PFS/nowhere/run" "$jd/true.sh"
  expect_fail "a drain timeout without an output directory refused" 1 "--fanstore-drain-timeout=5 needs --fanstore-output" \
    asu sbatch -N1 -o /dev/null --fanstore-drain-timeout=5 "$jd/true.sh"
}

main() {
  need_cluster ports
  local ds jd
  ds=$(md5_dataset)
  jd=$(job_dir)
  rm -rf "$PFS/out-both" "$PFS/out-stuck"
  install -d -o "$TUSER" "$PFS/out-parent"
  both_nodes_write "$ds" "$jd" "$PFS/out-parent/run1"
  undrained_is_named_and_kept "$jd" "$PFS/out-stuck"
  refused_at_submission "$jd"
  rm -rf "$PFS/out-parent" "$PFS/out-stuck"
}

main
finish
