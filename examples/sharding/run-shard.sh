#!/usr/bin/env bash
# One shard of a sharded translation: what each Slurm array task or Kubernetes Indexed Job pod runs.
#   SHARD_ID    this shard (Slurm: $SLURM_ARRAY_TASK_ID, Kubernetes: $JOB_COMPLETION_INDEX)
#   NUM_SHARDS  how many shards in all
#   MODEL       model directory;  INPUT  raw text, one sentence per line;  OUTDIR  where part-$SHARD_ID.jsonl goes
#   TCHSEQ      the tchseq binary (default: tchseq on PATH); THREADS, MAX_TOKENS, BUFFER_SIZE batching
# Afterwards: tchseq merge "$OUTDIR"/part-*.jsonl > translations.jsonl
set -euo pipefail
: "${SHARD_ID:?}" "${NUM_SHARDS:?}" "${MODEL:?}" "${INPUT:?}" "${OUTDIR:?}"
mkdir -p "$OUTDIR"
# tchseq writes --output completely or not at all, so a rerun task never leaves half a part behind
exec "${TCHSEQ:-tchseq}" --threads "${THREADS:-1}" translate -m "$MODEL" --format jsonl \
  --max-tokens "${MAX_TOKENS:-4096}" --buffer-size "${BUFFER_SIZE:-1024}" \
  --num-shards "$NUM_SHARDS" --shard-id "$SHARD_ID" \
  --input "$INPUT" --output "$OUTDIR/part-$SHARD_ID.jsonl"
