#!/usr/bin/env bash
# Slurm array job: 3 shards, then `tchseq merge` once they are all done.
#   sbatch --array=0-2 examples/sharding/slurm.sh
#   sbatch --dependency=afterok:<jobid> --wrap 'tchseq merge out/part-*.jsonl > translations.jsonl'
#SBATCH --job-name=tchseq-translate
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --time=01:00:00
set -euo pipefail
export SHARD_ID="$SLURM_ARRAY_TASK_ID"
export NUM_SHARDS="${NUM_SHARDS:-3}"
export THREADS="${SLURM_CPUS_PER_TASK:-2}"
export MODEL="${MODEL:-weights/multi30k.en-de}" INPUT="${INPUT:-input.txt}" OUTDIR="${OUTDIR:-out}"
exec bash "$(dirname "$0")/run-shard.sh"
