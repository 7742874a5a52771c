#!/usr/bin/env bash
# The ctest fixtures slurm_ports_start and slurm_netns_start: build the Debian packages of the build
# (cpack -G DEB into <base>/pkg), install them (dpkg -i), then start a 2-node ports or a netns
# cluster whose plugstack line is the package's conffile line, with the test cluster's node-local
# directory, stage-in timeout and cache size.
#
# Usage: start.sh BUILD_DIR ports|netns [NODES] (netns: 16 nodes unless NODES). See lib.sh. A FanStore package of another version already
# installed here is refused (the tests would not run this build); one of this version is used and
# left installed by stop.sh, which purges only what start.sh installed.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=../../packaging/lib.sh
source "$HERE/../packaging/lib.sh"
STAGEIN_TIMEOUT=120
# The conffile's keys that the test cluster sets itself (the plugin refuses a key given twice).
TEST_KEYS=(local_dir stagein_timeout cache_size)

# install_packages: builds and installs the packages; records in PKG_DIR/installed the ones that
# were not installed before (and in PKG_DIR/PKG.list their files) for stop.sh to purge.
install_packages() {
  local p s v want mine=() kept=()
  for p in cpack dpkg dpkg-deb dpkg-query; do
    command -v "$p" >/dev/null || { bad "no $p: the cluster runs the installed packages"; return 1; }
  done
  build_debs "$BUILD" "$PKG_DIR/debs" \
    || { bad "cpack -G DEB of $BUILD fails (build all its targets first)"; return 1; }
  for p in "${FANSTORE_PKGS[@]}"; do
    [[ -f ${DEB[$p]} ]] || { bad "cpack made no package $p"; return 1; }
  done
  want=$(dpkg-deb -f "${DEB[fanstore]}" Version)
  for p in "${FANSTORE_PKGS[@]}"; do
    s=$(pkg_state "$p")
    v=$(pkg_version "$p")
    if [[ -z $s || $s == un ]] || grep -qx "$p" "$PKG_DIR/installed" 2>/dev/null; then
      mine+=("$p")  # not installed, or left by a start whose stop did not run: ours to purge
    elif [[ $s == ii && $v == "$want" ]]; then
      kept+=("$p")
    else
      bad "$p $v (dpkg state $s) is installed here, not this build's $want: the Slurm tests would" \
        "not run this build. Remove it first: dpkg -P ${FANSTORE_PKGS[*]}"
      return 1
    fi
  done
  if [[ ${#mine[@]} -gt 0 && -e $FANSTORE_CONF ]] && ! dpkg -S "$FANSTORE_CONF" >/dev/null 2>&1; then
    bad "$FANSTORE_CONF is here and no package owns it: move it away first (dpkg -i would ask about it)"
    return 1
  fi
  # Recorded before dpkg -i, so that stop.sh purges a partial install too.
  if [[ ${#mine[@]} -gt 0 ]]; then printf '%s\n' "${mine[@]}"; fi >"$PKG_DIR/installed"
  DPKG_LOG=$PKG_DIR/dpkg.log
  : >"$DPKG_LOG"
  if ! install_debs; then
    indent "  " <"$DPKG_LOG"
    bad "dpkg -i ${DEB[*]} fails"
    return 1
  fi
  for p in "${FANSTORE_PKGS[@]}"; do
    [[ $(pkg_state "$p") == ii ]] || { bad "$p is not installed after dpkg -i"; return 1; }
  done
  rm -f "$PKG_DIR"/*.list
  for p in "${mine[@]}"; do dpkg -L "$p" >"$PKG_DIR/$p.list"; done
  ok "installed $want: ${mine[*]:-none}${kept:+ (already installed, kept: ${kept[*]})}"
}

start_cluster() {
  local mode=$1 nodes=$2 tmpl line plugin rest kv args=() a f
  # <base>/opt: where older versions of this script copied the build's files.
  rm -rf "$PKG_DIR/debs" "$BASE/opt"
  install -d -m 0755 "$PKG_DIR"
  install_packages || return 1
  # The package's conffile: `required PLUGIN agent=... preload=... local_dir=... ...`.
  line=$(grep -v '^[[:space:]]*\(#\|$\)' "$FANSTORE_CONF")
  read -r _ plugin rest <<<"$line"
  read -ra kv <<<"$rest"
  for a in "${kv[@]}"; do
    [[ " ${TEST_KEYS[*]} " == *" ${a%%=*} "* ]] || args+=("$a")
  done
  [[ " ${args[*]} " == *" agent=$FS_BIN/fanstore-agent "* ]] \
    || { bad "$FANSTORE_CONF names no agent=$FS_BIN/fanstore-agent: $line"; return 1; }
  for f in "$plugin" "$FS_BIN/fanstore" "$FS_BIN/fanstore-agent" \
    "$(sed -n 's/.* preload=\([^ ]*\).*/\1/p' <<<" $rest")"; do
    [[ -f $f ]] || { bad "missing $f, which $FANSTORE_CONF names or the cases run"; return 1; }
  done
  # The job scripts of the torch case, where the test user can read them wherever the checkout is.
  rm -rf "$SCRIPTS"
  install -d -m 0755 "$SCRIPTS"
  install -m 0755 "$HERE/make_images.py" "$HERE/torch_epoch.py" "$SCRIPTS/"
  install -d -m 1777 "$PFS"
  if [[ $mode == netns ]]; then tmpl=$BASE/local; else tmpl=$BASE/nodes/%n/local; fi
  args+=("local_dir=$tmpl" "stagein_timeout=$STAGEIN_TIMEOUT" "cache_size=4G")
  "$CLUSTER" start --base "$BASE" --mode "$mode" --nodes "$nodes" --plugin "$plugin" \
    --plugin-args "${args[*]}" || { bad "cluster start ($mode, $nodes nodes)"; return 1; }
  ok "cluster up: $mode mode, $nodes nodes, plugin $(cat "$BASE/plugstack.conf.d/fanstore.conf")"
}

# shellcheck disable=SC2034  # read by say and finish: the fixture's name, as ctest shows it.
TEST_NAME=slurm_start-${2:-}
case ${2:-} in
  ports) start_cluster ports 2 ;;
  netns) start_cluster netns "${3:-16}" ;;
  *) echo "usage: start.sh BUILD_DIR ports|netns [NODES]" >&2; exit 2 ;;
esac
finish
