#!/usr/bin/env bash
# The one command a GPU machine runs (docs/gpu.md): the check into /tmp, then what comes back into
# $OUT (at most 8 files): report.md, results.json and raw.tgz (every raw output and log).
# Options pass to gpu/check.sh (for example --deadline 540, under the machine's time limit per command).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:?OUT: the folder whose files come back}"
work=/tmp/gpu-check
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/nvidia-smi.txt" 2>&1
bash gpu/check.sh "$work" --device cuda "$@"
rc=$?
cp "$work/report.md" "$work/results.json" "$out/" 2>/dev/null
tar -czf "$out/raw.tgz" -C "$work" raw
cat "$work/report.md" 2>/dev/null | head -c 6000
exit $rc
