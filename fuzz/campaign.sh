#!/usr/bin/env bash
# One campaign round: each target in turn on one core (nice 19), until RUNS executions or
# SECONDS seconds, from fuzz/corpus/<target> (fuzz/seed.sh) plus the committed corpus-min.
# Prints a table row per target for fuzz/README.md. Usage: fuzz/campaign.sh [SECONDS] [RUNS] [target...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
SECS="${1:-900}"; RUNS="${2:-10000000}"; shift $(( $# > 2 ? 2 : $# ))
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(safetensors dictionary sentencepiece_model csv_rows pickle legacy torch_zip container bpe_codes)
cargo +nightly fuzz build -O >/dev/null
mkdir -p logs
echo "| target | runs | seconds | exec/s | coverage (cov / ft) | crashes |"
echo "|---|---|---|---|---|---|"
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t"
    case "$t" in dictionary|bpe_codes|csv_rows) maxlen=4096 ;; *) maxlen=65536 ;; esac
    start=$(date +%s)
    nice -n 19 cargo +nightly fuzz run -O "$t" "corpus/$t" "corpus-min/$t" -- \
        -runs="$RUNS" -max_total_time="$SECS" -max_len="$maxlen" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 > "logs/$t.log" 2>&1 || true
    secs=$(( $(date +%s) - start ))
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo 0)
    line=$(grep -E '^#[0-9]+.*(DONE|cov:)' "logs/$t.log" | tail -1)
    cov=$(sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\).*/\1 \/ \2/p' <<<"$line")
    crashes=$(ls "artifacts/$t" 2>/dev/null | wc -l)
    echo "| $t | $runs | $secs | $(( runs / (secs > 0 ? secs : 1) )) | $cov | $crashes |"
done
