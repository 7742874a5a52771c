#!/usr/bin/env bash
# slurm_pyxis (netns cluster, a 2-node job): containers started by pyxis and enroot (srun --container-image),
# built from their public sources pinned to a commit (../pyxis-enroot.sh). A `--fanstore` job runs a
# step in a static-busybox squashfs image on both nodes, with the dataset bound into the container
# (--container-mounts=$FANSTORE_MOUNT:/data:ro): every file's md5 inside the container matches the
# source, and the container lists the same names. pyxis's line goes after FanStore's in
# plugstack.conf.d, slurmd restarts to load it, and both are undone at the end; the job leaves
# nothing on any node, and pyxis removes its container. enroot keeps its containers in each node's
# own local directory: in ports mode the nodes share one file system, and pyxis names a step's
# container alike on every node (and removes it with the environment of the step's srun, node1's).
#
# Usage: pyxis.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR netns). See lib.sh.
# Skipped (77) when the sources of pyxis and enroot cannot be had (see ../pyxis-enroot.sh).
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOTS=enroot  # enroot's per-user directories (runtime, data, cache, temp), in each node's local directory

# busybox_image: a squashfs image holding a static busybox, as `enroot import` would make.
busybox_image() {
  local img=$PFS/busybox.sqsh root=$PFS/busybox-root c
  if [[ ! -s $img ]]; then
    rm -rf "$root"
    mkdir -p "$root"/{bin,dev,proc,sys,tmp,etc,root,data,jd}
    touch "$root"/etc/{passwd,group,hosts,resolv.conf}
    cp /bin/busybox "$root/bin/"
    for c in sh md5sum find sort cat; do ln -s busybox "$root/bin/$c"; done
    mksquashfs "$root" "$img.tmp" -noappend -quiet -all-root >/dev/null && mv "$img.tmp" "$img"
    rm -rf "$root"
    chmod 0644 "$img"
  fi
  echo "$img"
}

# undo: pyxis's line out of plugstack.conf.d, slurmd restarted without it, enroot's directories gone.
undo() {
  rm -f "$BASE/plugstack.conf.d/pyxis.conf"
  "$CLUSTER" restart-slurmd --base "$BASE" >/dev/null 2>&1 || echo "$TEST_NAME: restarting slurmd failed" >&2
  rm -rf "$BASE"/nodes/*/local/"$ROOTS" "$BASE/state/pyxis"
}

main() {
  need_cluster netns
  local p rc ds img jd j st n f left nodes=()
  p=$("$HERE/pyxis-enroot.sh") && rc=0 || rc=$?
  if ((rc == 77)); then
    say "skipped: pyxis and enroot could not be built here (see tests/slurm/pyxis-enroot.sh)"
    exit 77
  fi
  ((rc == 0)) && ok "pyxis and enroot built from their sources ($p)" || { bad "building pyxis and enroot failed"; return; }
  # enroot keeps each user's containers in the node's local directory (its defaults are under $HOME
  # and /run): made here, root's, with the test user's own 0700 directory in it, since the local
  # directory itself is open to every user.
  for f in "$BASE"/nodes/*/local; do
    rm -rf "${f:?}/$ROOTS"
    install -d -m 0755 "$f/$ROOTS"
    install -d -m 0700 -o "$TUSER" -g "$TUSER" "$f/$ROOTS/$(uid_of)"
  done
  # shellcheck disable=SC2016  # enroot expands ${UID} as it reads its configuration
  printf 'ENROOT_%s %s/${UID}/%s\n' RUNTIME_PATH "$BASE/local/$ROOTS" run DATA_PATH "$BASE/local/$ROOTS" data \
    CACHE_PATH "$BASE/local/$ROOTS" cache TEMP_PATH "$BASE/local/$ROOTS" tmp >"$p/etc/enroot/enroot.conf"
  echo "required $p/lib/slurm/spank_pyxis.so runtime_path=$BASE/state/pyxis" >"$BASE/plugstack.conf.d/pyxis.conf"
  chmod 0644 "$BASE/plugstack.conf.d/pyxis.conf"
  trap undo EXIT
  # slurmd loads the plugins as it starts; pyxis runs `enroot` from its PATH.
  PATH=$p/bin:/usr/sbin:/usr/bin:/sbin:/bin "$CLUSTER" restart-slurmd --base "$BASE" >/dev/null ||
    { bad "slurmd did not restart with pyxis"; return; }
  ok "slurmd restarted with pyxis after FanStore in plugstack.conf.d ($(cd "$BASE/plugstack.conf.d" && echo *.conf))"

  ds=$(md5_dataset)
  img=$(busybox_image)
  jd=$(job_dir)
  expected_md5 "$PFS/tree" >"$jd/expected"
  (cd "$PFS/tree" && find . | LC_ALL=C sort) >"$jd/expected.names"
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
srun -N2 --ntasks-per-node=1 --container-image="$IMG" --container-mounts="$FANSTORE_MOUNT:/data:ro,$JD:/jd" \
  sh -c 'cd /data || exit 1
    while read -r sum f; do md5sum "$f"; done < /jd/expected > "/jd/md5.$SLURMD_NODENAME"
    find . | LC_ALL=C sort > "/jd/names.$SLURMD_NODENAME"
    test -x /bin/busybox && echo "container on $SLURMD_NODENAME"'
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu env JD="$jd" IMG="$img" sbatch --parsable -N2 -o "$jd/out.%j" --export=ALL --fanstore="$ds" \
    "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j with an srun --container-image step completed" || bad "job $j ended $st"
  for f in "$jd"/md5.*; do [[ -e $f ]] && nodes+=("${f##*/md5.}"); done
  ((${#nodes[@]} == 2)) && ok "the step ran on 2 nodes (${nodes[*]})" || bad "the step wrote md5 lists on ${#nodes[@]} nodes, not 2"
  for n in "${nodes[@]}"; do
    grep -q "container on $n" "$jd/out.$j" && ok "$n: the step ran in the busybox container" ||
      bad "$n: no line from the container"
    diff -u "$jd/expected" "$jd/md5.$n" >/dev/null &&
      ok "$n: in the container, the md5 of all $(wc -l <"$jd/expected") files under /data match the source" ||
      bad "$n: md5 mismatch:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.$n" 2>&1 | head -20)"
    [[ -s $jd/names.$n ]] && diff -u "$jd/expected.names" "$jd/names.$n" >/dev/null &&
      ok "$n: in the container, find lists the same $(wc -l <"$jd/expected.names") names as the source" ||
      bad "$n: find in the container differs:"$'\n'"$(diff -u "$jd/expected.names" "$jd/names.$n" 2>&1 | head -20)"
  done
  check_clean "$j"
  left=$(find "$BASE"/nodes/*/local/"$ROOTS" -mindepth 3 -maxdepth 3 -path '*/data/*' 2>/dev/null)
  [[ -z $left ]] && ok "pyxis removed its containers on every node" || bad "containers left: $left"
}

main
finish
