#!/usr/bin/env bash
# Checkpoint load time vs the time to read the file (issue: loading must not be the bottleneck).
# Builds a ~1 GB fairseq checkpoint (transformer_vaswani_wmt_en_de_big, random weights, 40k joint
# vocabulary) with fairseq itself into bench/out/, then times `load_checkpoint` on it and on the
# bundled model.   bash bench/load.sh [REPEATS]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/bench/out"
mkdir -p "$OUT"
if [ ! -f "$OUT/big.pt" ]; then
    ( source "$ROOT/reference/env.sh"; python "$ROOT/reference/make_big_checkpoint.py" "$OUT/big.pt" )
fi
cargo build --release --example load_bench --manifest-path "$ROOT/Cargo.toml" >/dev/null
"$ROOT/target/release/examples/load_bench" "$OUT/big.pt" "${1:-3}"
"$ROOT/target/release/examples/load_bench" "$ROOT/weights/multi30k.en-de/model.pt" "${1:-3}"
