#!/usr/bin/env bash
# Where a run's time goes on the device: `bash gpu/profile.sh OUT [COMPUTE_TYPE ...]` translates
# the first 320 test sentences of gpu/data at batch 32 with each compute type (default exact and
# float16) under TCHSEQ_OP_PROFILE with CUDA_LAUNCH_BLOCKING=1, so that each operator's time
# includes its kernels; writes OUT/<type>.tsv (bench/op_profile.py reads them) and OUT/<type>.err.
# BATCH and LINES change the batch size and the number of sentences; BLOCKING=0 leaves the
# launches asynchronous (a CUDA graph cannot be captured under CUDA_LAUNCH_BLOCKING=1), so that
# the profile then counts the operators a step launches rather than timing their kernels.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:?usage: bash gpu/profile.sh OUT [COMPUTE_TYPE ...]}"
shift
mkdir -p "$out"
python=/opt/torch/.venv/bin/python
[[ -x $python ]] || python=python3
export LIBTORCH="$("$python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')"
zcat gpu/data/test_2016_flickr.en.gz | head -"${LINES:-320}" > "$out/input.en"
for ct in "${@:-exact float16}"; do
  for c in $ct; do
    started=$(date +%s%N)
    env CUDA_LAUNCH_BLOCKING="${BLOCKING:-1}" TCHSEQ_OP_PROFILE="$out/$c.tsv" gpu/bin/tchseq --device "${DEVICE:-cuda}" translate \
      -m weights/multi30k.en-de --compute-type "$c" --beam 5 --batch-size "${BATCH:-32}" --input "$out/input.en" > "$out/$c.out" 2> "$out/$c.err"
    rc=$?
    echo "$c: rc $rc, $(( ($(date +%s%N) - started) / 1000000 )) ms"
    sort -t$'\t' -k5,5nr "$out/$c.tsv" | head -12
  done
done
