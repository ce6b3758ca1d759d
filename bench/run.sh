#!/usr/bin/env bash
# `make bench`: tchseq vs fairseq 0.12.2 vs CTranslate2 (translate, latency, score, start-up),
# at the bundled model's size and at transformer-base, transformer-big and M2M-100-418M sizes
# (bench/sizes.py); writes bench/results.md, and on a CPU with AVX-512 the same rows held to AVX2
# in bench/results-avx2.md; then generate and sacrebleu beside fairseq-generate
# and sacrebleu (bench/generate.py, bench/generate-results.md). Then
# bench/memory.py (peak RSS and throughput of score at 10k/100k/1M rows and translate at 10k/100k
# lines, about an hour more) writes bench/memory-results.md, and a greedy translate of 10k/100k/1M
# lines with its resident size at each (about 50 minutes more) bench/memory-results-greedy.md;
# BENCH_MEMORY=0 skips both.
#   bash bench/run.sh [--threads 2] [--reps 3] [--sizes bundled,base,big,m2m] [--size-lines 128]
# Needs the reference venv (`make reference-venv`) and a release build (`make build`); `make
# bench` provides both. Scratch files (converted models, the models of each size) go to bench/work/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source reference/env.sh
# without reference/ on PYTHONPATH: its fixes import torch, and a child's peak RSS (wait4) starts
# from its parent's; bench.py puts it back for fairseq's own processes
env -u PYTHONPATH python bench/bench.py "$@"
# the same rows with every system held to AVX2 and FMA (most servers' CPUs), where this CPU has more
if grep -qw avx512f /proc/cpuinfo; then
    env -u PYTHONPATH python bench/bench.py --isa avx2 --out bench/results-avx2.md "$@"
fi
# tchseq generate beside fairseq-generate, tchseq sacrebleu beside sacrebleu: bench/generate-results.md
env -u PYTHONPATH python bench/generate.py
if [ "${BENCH_MEMORY:-1}" != 0 ]; then
    env -u PYTHONPATH python bench/memory.py
    env -u PYTHONPATH python bench/memory.py --score-rows '' --translate-lines 10000,100000,1000000 --beam 1 --trace \
        --out bench/memory-results-greedy.md
fi
