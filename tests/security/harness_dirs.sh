#!/usr/bin/env bash
# The test harness's own directories under world-writable /var/tmp (the Slurm cluster's base, the
# benchmark cache, the pyxis/enroot build cache) refuse a directory that another user made first,
# since root reads configurations and loads plugins from them: cluster.sh start, run.sh and
# pyxis-enroot.sh each stop with a message naming the directory, and write nothing into it. A
# directory of root's, 0755, passes.
# Usage: harness_dirs.sh BUILD_DIR (root; skipped otherwise)
# shellcheck disable=SC2015  # ok returns 0, so `c && ok .. || bad ..` is an if-else.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib.sh"
[[ $(id -u) -eq 0 ]] || { echo "harness_dirs: skipped: needs root (to make another user's directory)"; exit 77; }
BUILD=$(cd "$1" && pwd)
T=$(mktmp)
trap 'rm -rf "$T"' EXIT
chmod 0755 "$T"

# refused NAME DIR CMD...: CMD must fail, name DIR, and leave DIR empty (unless it is a link).
refused() {
  local name=$1 dir=$2 out rc
  shift 2
  out=$("$@" 2>&1) && rc=0 || rc=$?
  if ((rc != 0)) && [[ $out == *"$dir"* ]] && { [[ -L $dir ]] || [[ -z $(ls -A "$dir") ]]; }; then
    ok "$name: refused ($(grep -m1 -o "$dir is not.*first" <<<"$out"))"
  else
    bad "$name: exit $rc, output: ${out:0:300}; in the directory: $(find "$dir" -mindepth 1 -maxdepth 1 | head -3)"
  fi
}

for who in nobody:0755 root:0777; do
  d=$T/base.${who%%:*}.${who##*:}
  mkdir "$d" && chown "${who%%:*}" "$d" && chmod "${who##*:}" "$d"
  refused "cluster.sh start, base owned by ${who%%:*}, mode ${who##*:}" "$d" \
    "$HERE/../slurm/cluster.sh" start --base "$d"
  refused "run.sh --cache, owned by ${who%%:*}, mode ${who##*:}" "$d" \
    "$HERE/../bench/run.sh" --quick --build "$BUILD" --cache "$d" --out "$T/out"
  refused "pyxis-enroot.sh, cache owned by ${who%%:*}, mode ${who##*:}" "$d" "$HERE/../slurm/pyxis-enroot.sh" "$d"
done
# A planted build: the cached plugin must not be taken from another user's directory either.
d=$T/planted
mkdir -p "$d/pyxis-10751994-enroot-8ea147d3"/{bin,lib/slurm}
touch "$d/pyxis-10751994-enroot-8ea147d3/lib/slurm/spank_pyxis.so"
install -m 0755 /dev/null "$d/pyxis-10751994-enroot-8ea147d3/bin/enroot"
chown -R nobody "$d"
out=$("$HERE/../slurm/pyxis-enroot.sh" "$d" 2>&1) && bad "pyxis-enroot.sh took a build planted by nobody: $out" ||
  ok "pyxis-enroot.sh does not take a build planted in a directory of nobody's"
ln -s "$T" "$T/link"
refused "pyxis-enroot.sh, cache a symbolic link" "$T/link" "$HERE/../slurm/pyxis-enroot.sh" "$T/link"
source "$HERE/../own_dir.sh"
own_dir "$T/mine/cache" 2>/dev/null && [[ $(stat -c %U:%a "$T/mine/cache") == root:755 ]] &&
  ok "a new directory is made root's, 0755, and accepted" || bad "own_dir of a new directory: $(stat -c %U:%a "$T/mine/cache" 2>&1)"
finish
