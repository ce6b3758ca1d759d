#!/usr/bin/env bash
# `make bench`: tchseq vs fairseq 0.12.2 vs CTranslate2 (translate, latency, score, start-up),
# at the bundled model's size and at transformer-base size; writes bench/results.md. Then
# bench/memory.py (peak RSS and throughput of score and translate at 10k/100k/1M rows, about an
# hour more; BENCH_MEMORY=0 skips it) writes bench/memory-results.md.
#   bash bench/run.sh [--threads 2] [--reps 3] [--sizes bundled,base] [--base-lines 200]
# Needs the reference venv (`make reference-venv`) and a release build (`make build`); `make
# bench` provides both. Scratch files (converted models, the base model) go to bench/work/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source reference/env.sh
# without reference/ on PYTHONPATH: its fixes import torch, and a child's peak RSS (wait4) starts
# from its parent's; bench.py puts it back for fairseq's own processes
env -u PYTHONPATH python bench/bench.py "$@"
if [ "${BENCH_MEMORY:-1}" != 0 ]; then
    env -u PYTHONPATH python bench/memory.py
fi
