#!/usr/bin/env bash
# How far tchseq's results move from the committed goldens when other kernels compute them: the
# golden tests under several kernel settings, each difference that tests/it/util/tolerance.rs
# checks logged (TCHSEQ_DRIFT_LOG), then the largest per tolerance and where it came from.
# The settings stand in for other CPUs: ATen's kernels per ISA, MKL's code paths, threads.
#   bash tests/drift.sh          (about 10 minutes on 2 cores; after `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=(translate:: bundled:: score::parity multilingual:: language_model:: decoding:: constraints:: compute_type::float32_gives model::end_to_end)
SETTINGS=(
  ""
  "ATEN_CPU_CAPABILITY=default"
  "ATEN_CPU_CAPABILITY=avx2"
  "ATEN_CPU_CAPABILITY=avx512"
  "MKL_CBWR=COMPATIBLE"
  "MKL_CBWR=AVX"
  "MKL_CBWR=AVX512"
  "MKL_CBWR=AVX2,STRICT ATEN_CPU_CAPABILITY=avx2"
  "TCHSEQ_TEST_THREADS=2"
)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# one build, then the test binary itself (a copy, so that a rebuild meanwhile changes nothing)
bin=$(cargo test --release --test it --no-run 2>&1 | sed -n 's/.*Executable tests\/it\/main.rs (\(.*\))/\1/p')
[ -n "$bin" ] || { echo "error: the integration tests do not build (cargo test --release --test it --no-run)" >&2; exit 2; }
cp "$bin" "$logs/it"
for i in "${!SETTINGS[@]}"; do
  setting=${SETTINGS[$i]}
  echo "${setting:-native kernels}" > "$logs/$i.name"
  # a test that fails still logs what it measured; the table shows it
  env $setting TCHSEQ_DRIFT_LOG="$logs/$i.log" "$logs/it" "${TESTS[@]}" > "$logs/$i.out" 2>&1 \
    || echo "note: tests failed under ${setting:-native kernels} (see the table)" >&2
done
python3 - "$logs" "${#SETTINGS[@]}" <<'PY'
import sys
from collections import defaultdict
logs, n = sys.argv[1], int(sys.argv[2])
worst = defaultdict(lambda: (0.0, ""))
for i in range(n):
    name = open(f"{logs}/{i}.name").read().strip()
    try:
        lines = open(f"{logs}/{i}.log").read().splitlines()
    except FileNotFoundError:
        continue
    per = defaultdict(float)
    for line in lines:
        kind, diff = line.rsplit("\t", 1)
        per[kind] = max(per[kind], float(diff))
    for kind, d in per.items():
        print(f"{name:<45} {kind:<45} {d:.3e}")
        if d >= worst[kind][0]:
            worst[kind] = (d, name)
print()
print("| tolerance | largest drift | under |")
print("|---|---:|---|")
for kind, (d, name) in sorted(worst.items()):
    print(f"| {kind} | {d:.2e} | {name} |")
PY
