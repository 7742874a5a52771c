#!/usr/bin/env bash
# The Slurm part of the README's first command: runs a real `sbatch --fanstore` job on a dataset.
# Starts the 2-node test cluster on BUILD_DIR's Debian packages (installed, then purged by
# e2e/stop.sh), submits as the test user fsalice a 2-node job whose tasks list the mount and
# checksum the files under it, prints the job's output, and stops the cluster. Run as root.
#   demo_job.sh BUILD_DIR DATASET.fs      (the dataset must be readable by fsalice)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -eq 2 ]] || { sed -n '2,7p' "$0"; exit 2; }
BUILD=$(realpath "$1")
DS=$(realpath "$2")
BASE=$(realpath -m "${FANSTORE_SLURM_BASE:-/var/tmp/fanstore-slurm}")

"$HERE/e2e/start.sh" "$BUILD" ports | grep -v '^slurm_'
trap '"$HERE/e2e/stop.sh" "$BUILD" >/dev/null 2>&1 || true' EXIT

jd=$BASE/jobs/demo
mkdir -p "$jd"
chown fsalice: "$jd"
cat >"$jd/job.sh" <<'JOB'
#!/bin/bash
echo "batch script on $SLURMD_NODENAME; the dataset is at $FANSTORE_MOUNT"
srun -N2 --ntasks-per-node=1 --label bash -c '
  echo "$SLURMD_NODENAME: $(find "$FANSTORE_MOUNT" -type f | wc -l) files, $(du -sh --apparent-size "$FANSTORE_MOUNT" | cut -f1)"
  echo "$SLURMD_NODENAME: checksum of all files: $(cd "$FANSTORE_MOUNT" && find . -type f | LC_ALL=C sort | xargs md5sum | md5sum | cut -c1-32)"'
JOB
chmod 0755 "$jd/job.sh"
echo "== sbatch -N2 --fanstore=$DS job.sh   (as fsalice)"
j=$(cd "$jd" && runuser -u fsalice -- sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$DS" "$jd/job.sh")
for _ in $(seq 1 600); do
  st=$(squeue -h -t all -j "$j" -o %T)
  [[ $st == PENDING || $st == CONFIGURING || $st == RUNNING || $st == COMPLETING ]] || break
  sleep 0.2
done
echo "== job $j: $st; its output:"
cat "$jd/out.$j"
echo "== the same checksum computed on the source, outside Slurm:"
src_sum=$(runuser -u fsalice -- /usr/bin/fanstore extract "$DS" "$jd/extracted" -q && cd "$jd/extracted" \
  && find . -type f | LC_ALL=C sort | xargs md5sum | md5sum | cut -c1-32)
echo "source: checksum of all files: $src_sum"
rm -rf "$jd/extracted"
echo "== at job end every node's agent saved its counters in $jd/fanstore-$j.stats:"
for _ in $(seq 1 100); do [[ -f $jd/fanstore-$j.stats && $(wc -l <"$jd/fanstore-$j.stats") -ge 2 ]] && break; sleep 0.2; done
/usr/bin/fanstore stats "$jd/fanstore-$j.stats" || true
[[ $st == COMPLETED ]] && [[ $(grep -c "checksum of all files: $src_sum" "$jd/out.$j") == 2 ]]
