#!/usr/bin/env bash
# The ctest fixtures slurm_ports_stop and slurm_netns_stop: stop the cluster, check that no job
# left a FanStore run directory in /dev/shm, then purge the packages start.sh installed (dpkg -P)
# and check that dpkg knows none of them and nothing they installed is left.
#
# Usage: stop.sh BUILD_DIR. See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=../../packaging/lib.sh
source "$HERE/../packaging/lib.sh"

# purge_packages: dpkg -P of what PKG_DIR/installed lists; nothing of them may be left.
purge_packages() {
  local mine=() pkg_left=() p
  [[ -f $PKG_DIR/installed ]] && mapfile -t mine <"$PKG_DIR/installed"
  if [[ ${#mine[@]} -eq 0 ]]; then
    ok "no package to purge (start.sh installed none)"
    return 0
  fi
  DPKG_LOG=$PKG_DIR/dpkg.log
  if purge_debs "${mine[@]}"; then
    ok "dpkg -P ${mine[*]}"
  else
    indent "  " <"$DPKG_LOG"
    bad "dpkg -P ${mine[*]} fails"
  fi
  for p in "${mine[@]}"; do check "$p is unknown to dpkg after dpkg -P" pkg_unknown "$p"; done
  if compgen -G "$PKG_DIR/*.list" >/dev/null; then
    mapfile -t pkg_left < <(pkg_leftovers "$PKG_DIR"/*.list)
  fi
  [[ ${#pkg_left[@]} -eq 0 ]] && ok "nothing the packages installed is left" \
    || bad "left after dpkg -P: ${pkg_left[*]}"
  # Kept after a failure, so that the next stop.sh purges again.
  if [[ $FAILURES -eq 0 ]]; then rm -rf "$PKG_DIR"; fi
}

"$CLUSTER" stop --base "$BASE" >/dev/null || bad "cluster stop"
left=$(find /dev/shm -maxdepth 1 -name "fanstore.$(uid_of).*" 2>/dev/null)
[[ -z $left ]] && ok "cluster stopped; no FanStore run directory left in /dev/shm" || bad "left in /dev/shm: $left"
purge_packages
# The cluster's plugstack line names the purged plugin: srun would fail to load it (the generated
# /etc/slurm/slurm.conf stays, pointing at <base>/plugstack.conf); start.sh writes it anew.
rm -f "$BASE/plugstack.conf.d/fanstore.conf"
check "srun works after the cluster stopped (no stale plugin line)" bash -c 'srun --version >/dev/null 2>&1 && ! srun --version 2>&1 | grep -q error'
finish
