#!/usr/bin/env bash
# Translate throughput, tchseq vs fairseq-interactive, on Multi30k test_2016_flickr (1000
# sentences, already Moses-tokenized and BPE'd so the text pipeline is measured separately),
# bundled model, beam 5, --batch-size 32, CPU, the same thread count. Checks the outputs agree.
#   bash bench/translate.sh        # THREADS=2 by default
# A first step of `make bench` (issue: benchmarks vs fairseq and CTranslate2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${DATA:-$(cd "$ROOT/.." && pwd)/shared/data/multi30k}"
MODEL="${MODEL:-$ROOT/weights/multi30k.en-de}"
THREADS="${THREADS:-2}"
source "$ROOT/reference/env.sh"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
python - "$DATA" "$MODEL/bpecodes" "$W/test.bpe.en" <<'PY'
import gzip, sys
from sacremoses import MosesTokenizer
from subword_nmt.apply_bpe import BPE
data, codes, out = sys.argv[1:]
bpe, tok = BPE(open(codes, encoding="utf-8")), MosesTokenizer(lang="en")
lines = gzip.open(f"{data}/test_2016_flickr.en.gz", "rt", encoding="utf-8").read().splitlines()
open(out, "w", encoding="utf-8").write("".join(bpe.process_line(tok.tokenize(l, aggressive_dash_splits=True, return_str=True, escape=True)) + "\n" for l in lines))
PY
t0=$(date +%s.%N)
fairseq-interactive "$MODEL" --path "$MODEL/model.pt" -s en -t de --cpu --beam 5 \
  --buffer-size 1024 --batch-size 32 --input "$W/test.bpe.en" 2>/dev/null | grep -E '^(H|W|S|D|P)-' > "$W/fairseq.txt"
t1=$(date +%s.%N)
"$ROOT/target/release/tchseq" --threads "$THREADS" --device cpu translate -m "$MODEL" --tokenizer none --bpe none \
  --format fairseq --beam 5 --buffer-size 1024 --batch-size 32 --input "$W/test.bpe.en" > "$W/tchseq.txt"
t2=$(date +%s.%N)
python - "$t0" "$t1" "$t2" "$W/fairseq.txt" "$W/tchseq.txt" <<'PY'
import sys
t0, t1, t2 = map(float, sys.argv[1:4])
def hyps(p):
    return {l.split("\t")[0]: l.split("\t")[2] for l in open(p, encoding="utf-8") if l.startswith("H-")}
f, t = hyps(sys.argv[4]), hyps(sys.argv[5])
toks = sum(len(h.split()) + 1 for h in t.values())
same = sum(f[k] == t.get(k) for k in f)
print(f"{len(f)} sentences, {toks} target tokens: fairseq-interactive {toks/(t1-t0):.0f} tok/s ({t1-t0:.2f}s), "
      f"tchseq {toks/(t2-t1):.0f} tok/s ({t2-t1:.2f}s), speed-up {(t1-t0)/(t2-t1):.2f}x; identical hypotheses {same}/{len(f)}")
PY
