#!/usr/bin/env bash
# slurm_reject (2-node ports cluster): missing, non-dataset, wrong-version, unreadable and relative
# datasets and a bad --fanstore-replicas or --fanstore-unpack are refused by sbatch, #SBATCH, srun
# and salloc, naming the path or the value; nothing is queued.
#
# Usage: reject.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local jd before after good
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
  expect_fail "bad --fanstore-unpack rejected by sbatch" 1 "--fanstore-unpack=later: must be auto, eager or lazy" \
    asu sbatch -N1 -o /dev/null --fanstore="$good" --fanstore-unpack=later "$jd/job.sh"
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

main
finish
