#!/usr/bin/env bash
# The ctest fixtures slurm_ports_start and slurm_netns_start: install the build's plugin, agent and
# interception library under <base>/opt, then start a 2-node ports or a 4-node netns cluster with
# them.
#
# Usage: start.sh BUILD_DIR ports|netns. See lib.sh.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STAGEIN_TIMEOUT=120

start_cluster() {
  local mode=$1 nodes=$2 tmpl
  local agent=${FANSTORE_TEST_AGENT:-$BUILD/bin/fanstore-agent}
  local preload=${FANSTORE_TEST_PRELOAD:-$BUILD/lib/libfanstore_preload.so}
  local f
  for f in "$BUILD/lib/spank_fanstore.so" "$BUILD/bin/fanstore" "$agent" "$preload"; do
    [[ -f $f ]] || { bad "missing build artefact $f (build the targets spank_fanstore fanstore fanstore-agent fanstore_preload)"; return 1; }
  done
  # The build tree may be private to root (e.g. under /root); install copies that every user can use.
  rm -rf "$OPT"
  install -d -m 0755 "$OPT" "$OPT/bin" "$OPT/lib"
  install -m 0755 "$agent" "$OPT/bin/fanstore-agent"
  install -m 0755 "$BUILD/bin/fanstore" "$OPT/bin/fanstore"
  install -m 0644 "$preload" "$OPT/lib/libfanstore_preload.so"
  install -m 0644 "$BUILD/lib/spank_fanstore.so" "$OPT/lib/spank_fanstore.so"
  install -m 0755 "$HERE/make_images.py" "$HERE/torch_epoch.py" "$OPT/bin/"
  install -d -m 1777 "$PFS"
  if [[ $mode == netns ]]; then tmpl=$BASE/local; else tmpl=$BASE/nodes/%n/local; fi
  "$CLUSTER" start --base "$BASE" --mode "$mode" --nodes "$nodes" --plugin "$OPT/lib/spank_fanstore.so" \
    --plugin-args "agent=$OPT/bin/fanstore-agent preload=$OPT/lib/libfanstore_preload.so local_dir=$tmpl stagein_timeout=$STAGEIN_TIMEOUT cache_size=1G" \
    || { bad "cluster start ($mode, $nodes nodes)"; return 1; }
  ok "cluster up: $mode mode, $nodes nodes, plugin $(cat "$BASE/plugstack.conf.d/fanstore.conf")"
}

# shellcheck disable=SC2034  # read by say and finish: the fixture's name, as ctest shows it.
TEST_NAME=slurm_start-${2:-}
case ${2:-} in
  ports) start_cluster ports 2 ;;
  netns) start_cluster netns 4 ;;
  *) echo "usage: start.sh BUILD_DIR ports|netns" >&2; exit 2 ;;
esac
finish
