#!/usr/bin/env bash
# Tokenize + BPE throughput on Multi30k train.en (29k lines): tchseq vs sacremoses + subword-nmt,
# both single-threaded, same codes (tests/fixtures/text/bpecodes). Token counts must agree.
# Measured 2026-11-21 on the 2-core dev box, idle, with the BPE word cache: rust 125,348 lines/s vs
# python 14,955 lines/s = 8.4x (412,879 tokens on both sides). Before the cache, loaded: rust 41,898 lines/s vs python
# 4,652 lines/s = 9.0x (412,879 tokens on both sides).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CORPUS="${1:-$ROOT/../shared/data/multi30k/train.en.gz}"
CODES="$ROOT/tests/fixtures/text/bpecodes"
cargo build --release --example text_bench --manifest-path "$ROOT/Cargo.toml" >/dev/null
zcat -f "$CORPUS" | "$ROOT/target/release/examples/text_bench" en "$CODES"
( source "$ROOT/reference/env.sh"; zcat -f "$CORPUS" | python "$ROOT/reference/text_bench.py" en "$CODES" 2>/dev/null )
