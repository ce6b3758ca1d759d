#!/usr/bin/env bash
# The one command a GPU machine runs (docs/gpu.md): the check into /tmp, then what comes back into
# $OUT (at most 8 files): report.md, results.json and raw.tgz (the logs and every output under 2 MB).
# Options pass to gpu/check.sh (for example --deadline 540, under the machine's time limit per command).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:?OUT: the folder whose files come back}"
work=/tmp/gpu-check
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/nvidia-smi.txt" 2>&1
bash gpu/check.sh "$work" --device cuda "$@"
rc=$?
cp "$work/report.md" "$work/results.json" "$out/" 2>/dev/null
# a file that comes back holds at most 16 MiB: the logs and the smaller outputs travel, the
# repeated inputs' large outputs stay behind
(cd "$work" && find raw -type f -size -2M -print0 | tar -czf "$out/raw.tgz" --null -T -)
cat "$work/report.md" 2>/dev/null | head -c 6000
exit $rc
