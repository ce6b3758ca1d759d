#!/usr/bin/env bash
# fairseq 0.12.2 --print-alignment goldens for `translate --print-alignment` and the attention
# plots: tests/fixtures/models/<name>/interactive/beam5_align.txt, the same run as
# interactive/beam5.txt (batched) plus --print-alignment, stdout minus fairseq's log lines.
# Run from anywhere: reference/alignment_goldens.sh [fixture names] (default: every fixture in
# the manifest).
set -euo pipefail
REF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$REF/.." && pwd)"
# shellcheck source=env.sh
source "$REF/env.sh"
cd "$ROOT"
if [ $# -gt 0 ]; then
    names=("$@")
else
    mapfile -t names < <(python -c 'import json; [print(f["name"]) for f in json.load(open("tests/fixtures/models/manifest.json"))["fixtures"]]')
fi
for name in "${names[@]}"; do
    d="tests/fixtures/models/$name"
    out="$d/interactive/beam5_align.txt"
    fairseq-interactive "$d" --path "$d/model.pt" -s src -t tgt --cpu \
        --input tests/fixtures/models/inputs.src --beam 5 --buffer-size 1024 --batch-size 16 \
        --print-alignment 2>/dev/null | grep -Ev '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| ' > "$out"
    # the run differs from beam5.txt only by the A- lines
    if ! diff <(grep -Ev '^(W|A)-' "$out") <(grep -Ev '^W-' "$d/interactive/beam5.txt") > /dev/null; then
        echo "$name: hypotheses differ from interactive/beam5.txt" >&2
        exit 1
    fi
    echo "$out: $(grep -c '^A-' "$out") A- lines"
done
