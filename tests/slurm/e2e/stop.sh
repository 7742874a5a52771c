#!/usr/bin/env bash
# The ctest fixtures slurm_ports_stop and slurm_netns_stop: stop the cluster and check that no job
# left a FanStore run directory in /dev/shm.
#
# Usage: stop.sh BUILD_DIR. See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$CLUSTER" stop --base "$BASE" >/dev/null || bad "cluster stop"
left=$(find /dev/shm -maxdepth 1 -name "fanstore.$(uid_of).*" 2>/dev/null)
[[ -z $left ]] && ok "cluster stopped; no FanStore run directory left in /dev/shm" || bad "left in /dev/shm: $left"
finish
