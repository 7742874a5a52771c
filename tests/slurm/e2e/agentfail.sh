#!/usr/bin/env bash
# slurm_agentfail (2-node ports cluster): a corrupt shard: the job fails before its script runs and
# its output carries the agent's message.
#
# Usage: agentfail.sh BUILD_DIR, with the cluster up (start.sh BUILD_DIR ports). See lib.sh.
# shellcheck disable=SC2015  # ok returns 0, so `[[ c ]] && ok .. || bad ..` is an if-else.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
  need_cluster ports
  local good bad_ds=$PFS/corrupt.fs jd j st shard shards
  good=$(md5_dataset)
  rm -rf "$bad_ds"
  cp -r "$good" "$bad_ds"
  shards=("$bad_ds"/shard-*)
  shard=${shards[0]##*/}
  # Flip one byte in the middle of the first shard: its hash no longer matches the manifest.
  flip_byte "$bad_ds/$shard" $(($(stat -c %s "$bad_ds/$shard") / 2))
  chown -R "$TUSER:" "$bad_ds"
  jd=$(job_dir)
  must_not_run_script "$jd"
  j=$(asu sbatch --parsable -N2 -o "$jd/out.%j" --fanstore="$bad_ds" "$jd/job.sh" 2>&1) || { bad "sbatch: $j"; return; }
  st=$(wait_job "$j")
  job_output "$jd/out.$j"
  [[ $st == FAILED ]] && ok "job $j with a corrupt shard failed" || bad "job $j ended $st"
  # node1's agent reports its own failure, or, when node2's failed first and the step was ended, the
  # batch step quotes the agents' output: either way the job output names the corrupt shard.
  grep -q "fanstore: task_init: the FanStore agent on node1 " "$jd/out.$j" && grep -q "$shard" "$jd/out.$j" \
    && ok "the job output carries the agent's message naming $shard" || bad "no agent message in the job output"
  ! grep -q "must not run" "$jd/out.$j" && ok "the batch script never ran" || bad "the batch script ran"
  check_clean "$j"
}

main
finish
