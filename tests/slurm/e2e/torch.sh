#!/usr/bin/env bash
# slurm_torch (2-node ports cluster): srun --fanstore from a login shell: a torchvision ImageFolder
# + DataLoader(num_workers=2) epoch over the mount gives the same sample count and pixel sum as on
# the source.
#
# Usage: torch.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local src=$PFS/images ds=$PFS/images.fs jd out ref st
  if [[ ! -d $src ]]; then
    asu "$PY" "$SCRIPTS/make_images.py" "$src" 3 16 || bad "make_images"
  fi
  pack_dataset "$src" "$ds" --shard-size 64K || bad "pack $src"
  jd=$(job_dir)
  ref=$(asu "$PY" "$SCRIPTS/torch_epoch.py" "$src" 2>&1 | grep '^EPOCH') || true
  say "reference on the source tree: $ref"
  [[ $ref == "EPOCH samples=48 classes=3 "* ]] || bad "reference epoch on the source: '$ref'"
  # shellcheck disable=SC2016  # the single-quoted script expands in the job's shell, not here.
  out=$(cd "$jd" && asu srun -N2 --ntasks-per-node=1 --fanstore="$ds" bash -c \
          'r=$('"$PY $SCRIPTS/torch_epoch.py"' "$FANSTORE_MOUNT" 2>&1); echo "$r" >&2; echo "RESULT $SLURMD_NODENAME $SLURM_JOB_ID $(grep ^EPOCH <<<"$r")"' 2>&1)
  st=$?
  indent '  | ' <<<"$out"
  [[ $st -eq 0 ]] && ok "srun --fanstore torch epoch exited 0" || bad "srun exited $st"
  local n j
  for n in node1 node2; do
    if grep -q "^RESULT $n [0-9]* $ref\$" <<<"$out"; then ok "$n: ImageFolder+DataLoader(num_workers=2) epoch over the mount matches the source"
    else bad "$n: epoch over the mount differs from the source"; fi
  done
  j=$(awk '$1 == "RESULT" { print $3; exit }' <<<"$out")
  [[ -n $j ]] && check_clean "$j"
}

main
finish
