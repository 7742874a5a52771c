# shellcheck shell=bash
# The Debian packages of a build, as the tests build, install and purge them: shared by
# deb_test.sh (install and remove as a site does) and the Slurm fixtures (tests/slurm/e2e/start.sh
# and stop.sh: the test cluster runs the installed packages). Source tests/lib.sh first (indent).
# dpkg's output goes to $DPKG_LOG (default /dev/null); set it before calling.

FANSTORE_PKGS=(fanstore fanstore-preload fanstore-spank)
# shellcheck disable=SC2034  # read by the scripts that source this file.
FANSTORE_CONF=/etc/slurm/plugstack.conf.d/fanstore.conf
DPKG_LOG=${DPKG_LOG:-/dev/null}

# pkg_state PKG: dpkg's two-letter state (ii installed, rc config files only); empty if unknown.
pkg_state() { dpkg-query -W -f '${db:Status-Abbrev}' "$1" 2>/dev/null | cut -c1-2 || true; }
pkg_known() { local s; s=$(pkg_state "$1"); [[ -n $s && $s != un ]]; }
pkg_unknown() { ! pkg_known "$1"; }
pkg_version() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || true; }

# dpkg ARGS..., waiting while another process (apt) holds its lock; output appended to $DPKG_LOG.
dpkg_locked() {
  local i out rc
  for i in $(seq 120); do
    out=$(DEBIAN_FRONTEND=noninteractive dpkg "$@" 2>&1)
    rc=$?
    grep -q 'dpkg frontend lock\|dpkg status database is locked' <<<"$out" || break
    [[ $i -eq 1 ]] && echo "  (dpkg is locked by another process; waiting)"
    sleep 1
  done
  printf '%s\n' "$out" >>"$DPKG_LOG"
  return "$rc"
}

# build_debs BUILD_DIR OUT: `cpack -G DEB` of the build into OUT (its log: OUT/cpack.log), then
# DEB[PKG] is the .deb of each of FANSTORE_PKGS (empty when cpack made none). On failure, prints
# the log and returns 1.
build_debs() {
  local b=$1 out=$2 p
  declare -gA DEB=()
  mkdir -p "$out"
  rm -f "$out"/*.deb
  if ! (cd "$out" && cpack -G DEB --config "$b/CPackConfig.cmake" -B "$out") >"$out/cpack.log" 2>&1
  then
    indent "  " <"$out/cpack.log"
    return 1
  fi
  for p in "${FANSTORE_PKGS[@]}"; do
    DEB[$p]=$(ls "$out/${p}"_*.deb 2>/dev/null)
  done
}

# install_debs: dpkg -i of the packages build_debs made.
install_debs() { dpkg_locked -i "${DEB[@]}"; }
# purge_debs PKG...: dpkg -P.
purge_debs() { dpkg_locked -P "$@"; }

# pkg_leftovers LIST...: what the file lists (dpkg -L, saved while installed) name and is still
# there after a purge; a directory other packages own (/usr/bin, Slurm's plugin directory), or that
# holds what others put there (/usr/local/lib), stays.
pkg_leftovers() {
  local path
  while read -r path; do
    [[ $path == /. || ! -e $path ]] && continue
    [[ -d $path ]] && { dpkg -S "$path" >/dev/null 2>&1 || [[ -n $(ls -A "$path") ]]; } && continue
    echo "$path"
  done < <(cat "$@")
}
