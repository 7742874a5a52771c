#!/usr/bin/env bash
# slurm_split (2-node ports cluster): --fanstore-replicas=1 on a 28-shard dataset: the nodes' shards
# are disjoint, cover all 28 and match the round-robin placement; each agent read only its shards
# from the dataset; md5 of every file on both nodes; opens were local or remote/cached, no fallback.
#
# Usage: split.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local ds src=$PFS/many jd j st n r total src_bytes n_read stats status shards want ids
  ds=$(many_dataset)
  jd=$(job_dir)
  expected_md5 "$src" >"$jd/expected"
  fstool placement "$ds" "$src" 2 1 >"$jd/placement" || { bad "fstool placement"; return; }
  total=$(jget "$(tail -1 "$jd/placement")" "['total_source']")
  cat >"$jd/job.sh" <<'EOF'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$FANSTORE_MOUNT" || exit 1
  while read -r sum f; do md5sum "$f"; done < "$JD/expected" > "$JD/md5.$SLURMD_NODENAME"'
touch "$JD/read"
while [ ! -e "$JD/go" ]; do sleep 0.1; done
EOF
  chmod 0755 "$jd/job.sh"
  j=$(asu env JD="$jd" sbatch --parsable -N2 --chdir="$jd" -o "$jd/out.%j" --export=ALL --fanstore="$ds" \
        --fanstore-replicas=1 "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  if wait_for "$j" "$jd/read" 60; then
    for n in node1 node2; do
      status_of "$j" $n >"$jd/status.$n"
      agent_stats "$j" $n >"$jd/stats.$n"
    done
  fi
  touch "$jd/go"
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == COMPLETED ]] && ok "2-node job $j (--fanstore-replicas=1) completed" || bad "job $j ended $st"
  local all=()
  for n in node1 node2; do
    r=$((${n#node} - 1))
    status=$(cat "$jd/status.$n")
    stats=$(cat "$jd/stats.$n")
    [[ -n $status && -n $stats ]] || { bad "$n: no status.json or stats"; continue; }
    shards=$(jget "$status" "['shards']")
    want=$(jget "$(sed -n "$((r + 1))p" "$jd/placement")" "['shards']")
    read -ra ids <<<"$(tr -d '[],' <<<"$shards")"
    all+=("${ids[@]}")
    [[ $(jget "$status" "['rank']") == "$r" && $shards == "$want" ]] \
      && ok "$n (rank $r) staged $(wc -w <<<"${shards//,/ }") of 28 shards, as the placement says: $shards" \
      || bad "$n: rank $(jget "$status" "['rank']"), shards $shards; placement says rank $r holds $want"
    src_bytes=$(jget "$(sed -n "$((r + 1))p" "$jd/placement")" "['source_bytes']")
    n_read=$(jget "$stats" "['bytes_read_from_source']")
    ((n_read == src_bytes && n_read * 4 < total * 3)) \
      && ok "$n read $n_read of the dataset's $total bytes from the parallel file system ($((n_read * 100 / total)) %: its shards only)" \
      || bad "$n read $n_read bytes from the source (its shards: $src_bytes, dataset: $total)"
    say "$n stats: opens $(jget "$stats" "['opens']") bytes $(jget "$stats" "['bytes']") prefetch $(jget "$stats" "['prefetch']")"
    # The other node's files come through the peer: fetched on open, or prefetched (into the
    # cache, or into the node's image on a disk, where clients then open them as local).
    (($(jget "$stats" "['opens']['remote'] + d['opens']['cached'] + d['prefetch']['files']") > 0 && $(jget "$stats" "['opens']['local']") > 0)) \
      && ok "$n: files held here opened locally ($(jget "$stats" "['opens']['local']")), files of the other node through the peer (remote $(jget "$stats" "['opens']['remote']"), cached $(jget "$stats" "['opens']['cached']"), prefetched $(jget "$stats" "['prefetch']['files']"))" \
      || bad "$n: no local or no remote/cached opens: $(jget "$stats" "['opens']")"
    [[ $(jget "$stats" "['cache']['capacity']") == $((4 << 30)) ]] \
      && ok "$n: the site's cache_size=4G reached the agent" || bad "$n: cache capacity $(jget "$stats" "['cache']")"
    (($(jget "$stats" "['opens']['fallback'] + d['opens']['errors'] + d['peers']['fetch_errors']") == 0)) \
      && ok "$n: no fallback to the dataset, no error while both agents are up" || bad "$n: fallbacks or errors: $(jget "$stats" "['opens']") $(jget "$stats" "['peers']")"
    if [[ -s $jd/md5.$n ]] && diff -q "$jd/expected" "$jd/md5.$n" >/dev/null; then
      ok "$n: md5 of all $(wc -l <"$jd/expected") files matches the source"
    else
      bad "$n: md5 mismatch:"$'\n'"$(diff -u "$jd/expected" "$jd/md5.$n" 2>&1 | head -10)"
    fi
  done
  [[ $(printf '%s\n' "${all[@]}" | sort -n | uniq | wc -l) == 28 && ${#all[@]} == 28 ]] \
    && ok "the two nodes' shards are disjoint and cover all 28" || bad "shards of the two nodes: ${all[*]}"
  ((${#all[@]} == 28)) && (($(jget "$(cat "$jd/stats.node1")" "['bytes_read_from_source']") + $(jget "$(cat "$jd/stats.node2")" "['bytes_read_from_source']") == total)) \
    && ok "together they read the dataset once ($total bytes)" || bad "the two stage-ins did not add up to the dataset"
  check_clean "$j"
}

main
finish
