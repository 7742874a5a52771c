#!/usr/bin/env bash
# slurm_kernelview (2-node ports cluster): the kernel-visible view. Each task also sees the dataset
# at $FANSTORE_MOUNT through the kernel (a FUSE mount in its own namespace, served by the node's
# agent), so what the interception library cannot reach works too: a static binary (busybox)
# reading and listing it, a script and a static ELF executed from it, a shared library found by the
# loader through LD_LIBRARY_PATH (ctypes), a Python C extension imported from it, the mount's parent
# listed, df, and containers that see the task's view: bubblewrap, Charliecloud's ch-run and
# rootless podman (runc), each binding the mount into the container. Every answer is compared with
# the same probe run on a read-only bind mount of the source tree; a write from a static binary is
# refused and changes nothing. Afterwards no FUSE mount and nothing in the mount prefix remains on the node.
#
# Usage: kernelview.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# code: a dataset that holds code as well as data: scripts, a static ELF, a shared library and a
# Python C extension (built here with the machine's compiler), and 20 random files.
code_dataset() {
  local src=$PFS/code ds=$PFS/code.fs ext i
  if [[ ! -f $src/.complete ]]; then
    rm -rf "$src" "$ds"
    mkdir -p "$src/bin" "$src/lib" "$src/pkg" "$src/data"
    printf '#!/bin/sh\necho "hello from the dataset, args: $*"\n' >"$src/bin/hello.sh"
    chmod 0755 "$src/bin/hello.sh"
    cp /bin/busybox "$src/bin/busybox"
    printf 'int fsdemo_answer(void) { return 42; }\n' >"$src/lib/fsdemo.c"
    gcc -shared -fPIC -o "$src/lib/libfsdemo.so" "$src/lib/fsdemo.c" || bad "cannot build libfsdemo.so"
    ext=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    cat >"$src/pkg/fsext.c" <<'EOF'
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "fsext", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_fsext(void) {
  PyObject* m = PyModule_Create(&def);
  if (m) PyModule_AddStringConstant(m, "origin", "a C extension from the dataset");
  return m;
}
EOF
    # shellcheck disable=SC2046  # the include flags are several words
    gcc -shared -fPIC $("$PY"-config --includes) -o "$src/pkg/fsext$ext" "$src/pkg/fsext.c" \
      || bad "cannot build the C extension"
    for i in $(seq 1 20); do head -c $((1000 + i * 733)) /dev/urandom >"$src/data/f$i.bin"; done
    touch "$src/.complete"
    chown -R -h "$TUSER:" "$src"
  fi
  pack_dataset "$src" "$ds" --shard-size 64K || bad "pack $src"
  echo "$ds"
}

# The container image: a directory holding a static busybox and a mount point for the dataset, run
# by Charliecloud as an image and by podman as a root file system (--rootfs).
container_images() {
  local img=$PFS/chimage
  if [[ ! -x $img/bin/busybox ]]; then
    mkdir -p "$img"/{bin,dev,proc,sys,tmp,etc,home,mnt/ds}
    touch "$img"/etc/{passwd,group,hosts,resolv.conf}
    cp /bin/busybox "$img/bin/"
    chown -R "$TUSER:" "$img"
  fi
}

main() {
  need_cluster ports
  local ds jd j st n ref
  ds=$(code_dataset)
  container_images
  jd=$(job_dir)
  # The probe: what each check printed, one line each. Run with LD_PRELOAD cleared where the
  # interception library must not be the one answering.
  cat >"$jd/probe.sh" <<'EOF'
#!/bin/bash
M=$1 CH=$2  # the dataset, the Charliecloud image
BB=/bin/busybox  # static: no LD_PRELOAD reaches it
echo "static md5: $(cd "$M/data" && $BB md5sum f*.bin | $BB md5sum | cut -c1-32)"
echo "static ls: $($BB ls "$M/data" | $BB wc -l) files"
echo "static stat: $($BB stat -c '%s %a' "$M/bin/hello.sh")"
echo "exec script: $("$M/bin/hello.sh" one two)"
echo "exec static ELF: $(env -u LD_PRELOAD "$M/bin/busybox" echo static ELF ran)"
echo "loader search: $(LD_LIBRARY_PATH=$M/lib /usr/bin/python3 -c 'import ctypes; print(ctypes.CDLL("libfsdemo.so").fsdemo_answer())' 2>&1)"
echo "C extension: $(PYTHONPATH=$M/pkg /usr/bin/python3 -c 'import fsext; print(fsext.origin)' 2>&1)"
echo "parent lists it: $($BB ls "$(dirname "$M")" | grep -cx "$(basename "$M")")"
echo "df: $($BB df "$M" >/dev/null 2>&1 && echo works)"
echo "static write: $($BB sh -c "echo x >> '$M/data/f1.bin'" 2>/dev/null && echo succeeded || echo refused)"
echo "static md5 after: $(cd "$M/data" && $BB md5sum f*.bin | $BB md5sum | cut -c1-32)"
echo "bwrap container: $(bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp -- $BB md5sum "$M/data/f7.bin" 2>&1 | cut -c1-32)"
echo "ch-run container: $(ch-run -b "$M:/mnt/ds" "$CH" -- /bin/busybox md5sum /mnt/ds/data/f8.bin 2>&1 | cut -c1-32)"
# podman, rootless, with state of this task's own: its pause process holds the mount namespace
# that later podman commands of the same state join, so a shared one would show them another
# task's (or no) view. It must not outlive the task either.
X=$(mktemp -d /tmp/fanstore-podman.XXXXXX)
mkdir -m 0700 "$X/xdg"
P=(env XDG_RUNTIME_DIR="$X/xdg" podman --root "$X/root" --runroot "$X/run" --tmpdir "$X/tmp" --runtime=runc
   --cgroup-manager=cgroupfs --events-backend=file)
echo "podman container: $("${P[@]}" run --rm --network=none --read-only -v "$M:/data:ro" --rootfs "$CH" \
  /bin/busybox md5sum /data/data/f9.bin 2>&1 | grep -v level=warn | cut -c1-32)"
# Cleanup prints nothing: podman's warnings carry a timestamp, and whether it warns depends on
# how the machine's / propagates, neither of which the comparison is about.
"${P[@]}" unshare rm -rf "$X/root" "$X/run" >/dev/null 2>&1
kill "$(cat "$X/tmp/pause.pid" 2>/dev/null)" 2>/dev/null
rm -rf "$X"
EOF
  chmod 0755 "$jd/probe.sh"
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
echo "$FANSTORE_KERNEL_VIEW" > "$JD/view.batch"
"$JD/probe.sh" "$FANSTORE_MOUNT" "$CH" > "$JD/probe.batch" 2>&1
srun -N2 --ntasks-per-node=1 bash -c '
  echo "$FANSTORE_KERNEL_VIEW" > "$JD/view.$SLURMD_NODENAME"
  "$JD/probe.sh" "$FANSTORE_MOUNT" "$CH" > "$JD/probe.$SLURMD_NODENAME" 2>&1'
EOF
  chmod 0755 "$jd/job.sh"
  chown -R "$TUSER:" "$jd"
  # The reference: the same probe, as the same user, on a read-only bind mount of the source tree
  # (in a mount namespace of its own).
  mkdir "$jd/ref"
  # shellcheck disable=SC2016  # expanded by the inner shell
  ref=$(unshare -m --propagation private bash -c 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" &&
          runuser -u "$3" -- env -i HOME="/home/$3" USER="$3" PATH=/usr/bin:/bin LANG=C.UTF-8 "$4" "$2" "$5"' \
          _ "$PFS/code" "$jd/ref" "$TUSER" "$jd/probe.sh" "$PFS/chimage" 2>&1)
  grep -q "static md5: [0-9a-f]" <<<"$ref" || bad "the reference probe failed: $ref"
  j=$(cd "$jd" && asu env JD="$jd" CH="$PFS/chimage" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" "$jd/job.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "job $j completed" || { bad "job $j ended $st"; job_output "$jd/out.$j"; }
  for n in batch node1 node2; do
    [[ $(cat "$jd/view.$n" 2>/dev/null) == on ]] && ok "$n: FANSTORE_KERNEL_VIEW=on" \
      || bad "$n: FANSTORE_KERNEL_VIEW=$(cat "$jd/view.$n" 2>&1)"
    if diff <(echo "$ref") "$jd/probe.$n" >/dev/null; then
      ok "$n: static binaries, exec, the loader, a C extension, the parent, df, a write, bwrap, ch-run and podman: as on a read-only bind mount"
    else
      bad "$n: the kernel view differs from the source tree:"$'\n'"$(diff <(echo "$ref") "$jd/probe.$n")"
    fi
  done
  check_clean "$j"
  # A step started inside the mount (srun takes the library's working directory): Slurm enters
  # it before the task runs, with the task's mixed ids (real root, effective user), so the view
  # must be served by then and let those ids in: the step starts there, and never hangs.
  cat >"$jd/job3.sh" <<'EOF'
#!/bin/bash
echo "want=$FANSTORE_MOUNT/data" > "$JD/inside"
cd "$FANSTORE_MOUNT/data" && timeout 60 srun -N1 -n1 bash -c 'echo "pwd=$(/bin/pwd)"; /bin/busybox ls | wc -l; grep -F " $FANSTORE_MOUNT " /proc/self/mountinfo | sed -n "s/.* - \([^ ]*\) .*/fstype=\1/p"' >> "$JD/inside" 2>&1
echo "rc=$?" >> "$JD/inside"
EOF
  chmod 0755 "$jd/job3.sh" && chown "$TUSER:" "$jd/job3.sh"
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N1 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" "$jd/job3.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "job $j (a step started inside the mount) completed" || { bad "job $j ended $st"; job_output "$jd/out.$j"; }
  grep -qx "rc=0" "$jd/inside" && ok "a step started inside the mount runs, without hanging" \
    || bad "inside the mount: $(cat "$jd/inside" 2>&1)"
  want=$(sed -n 's/^want=//p' "$jd/inside")
  [[ -n $want ]] && grep -qx "pwd=$want" "$jd/inside" \
    && ok "the step starts in its working directory inside the mount" \
    || bad "the step's working directory: $(cat "$jd/inside" 2>&1)"
  # One node holds every shard, on the cluster's disk: its EROFS image is the view itself, bound
  # by the plugin (issue 31), with no FUSE between the kernel and the files.
  grep -qx "fstype=erofs" "$jd/inside" && ok "a one-node job's view is the node's EROFS image (no FUSE)" \
    || bad "a one-node job's view: $(grep fstype "$jd/inside" 2>&1)"
  check_clean "$j"
  # A mount outside mount_prefix (here an existing directory of the user's) gets no kernel view:
  # anywhere else a user could lay a dataset over /etc for setuid programs. The library still
  # serves it.
  mkdir -p "$jd/elsewhere" && chown "$TUSER:" "$jd/elsewhere"
  cat >"$jd/job2.sh" <<'EOF'
#!/bin/bash
echo "$FANSTORE_KERNEL_VIEW" > "$JD/view2"
/bin/busybox ls "$FANSTORE_MOUNT" > "$JD/static2" 2>&1
ls "$FANSTORE_MOUNT" > "$JD/library2" 2>&1
EOF
  chmod 0755 "$jd/job2.sh" && chown "$TUSER:" "$jd/job2.sh"
  j=$(cd "$jd" && asu env JD="$jd" sbatch --parsable -N1 --chdir="$jd" -o "$jd/out.%j" --export=ALL \
        --fanstore="$ds" --fanstore-mount="$jd/elsewhere" "$jd/job2.sh" 2>&1) || { bad "sbatch failed: $j"; return; }
  st=$(wait_job "$j")
  [[ $st == COMPLETED ]] && ok "job $j (mount outside mount_prefix) completed" || { bad "job $j ended $st"; job_output "$jd/out.$j"; }
  grep -q "^off: the mount $jd/elsewhere is not under mount_prefix /fanstore" "$jd/view2" \
    && ok "outside mount_prefix: no kernel view, and the task is told why" || bad "view: $(cat "$jd/view2" 2>&1)"
  [[ ! -s $jd/static2 ]] && grep -qx bin "$jd/library2" \
    && ok "outside mount_prefix: the kernel shows the user's empty directory; the library serves the dataset" \
    || bad "static: $(head -3 "$jd/static2"); library: $(head -3 "$jd/library2")"
  check_clean "$j"
  grep -q "fuse.fanstore" /proc/self/mountinfo && bad "a FUSE mount of the view is left on the node: $(grep fuse.fanstore /proc/self/mountinfo | head -2)" \
    || ok "no FUSE mount left on the node"
  [[ -z $(ls -A /fanstore 2>/dev/null) ]] && ok "the mount prefix /fanstore is empty on the node" \
    || bad "/fanstore holds: $(ls -A /fanstore)"
}

main
finish
