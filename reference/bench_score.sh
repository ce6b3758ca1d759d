#!/usr/bin/env bash
# Throughput of `tchseq score` vs `fairseq-generate --score-reference` (rows/s) on Multi30k
# test2016 (1000 pairs) with the bundled model, both on CPU with the same thread count and batch size.
#   bash reference/bench_score.sh            # THREADS=1 BATCH=64 by default
# Needs the reference venv (reference/env.sh), a release build (cargo build --release) and
# /work/shared/data/multi30k (override with DATA=).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data/multi30k}"
MODEL="${MODEL:-$ROOT/weights/multi30k.en-de}"
THREADS="${THREADS:-1}"
BATCH="${BATCH:-64}"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
source "$ROOT/reference/env.sh"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT

# fairseq's moses tokenizer + subword-nmt, as fairseq's encoders apply them
python - "$DATA" "$MODEL/bpecodes" "$W" <<'PY'
import csv, gzip, sys
from sacremoses import MosesTokenizer
from subword_nmt.apply_bpe import BPE
data, codes, out = sys.argv[1:]
bpe = BPE(open(codes, encoding="utf-8"))
sides = {}
for lang in ("en", "de"):
    tok = MosesTokenizer(lang=lang)
    lines = gzip.open(f"{data}/test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
    sides[lang] = [bpe.process_line(tok.tokenize(l, aggressive_dash_splits=True, return_str=True, escape=True)) for l in lines]
    open(f"{out}/test.{lang}", "w", encoding="utf-8").write("".join(l + "\n" for l in sides[lang]))
with open(f"{out}/pairs.csv", "w", encoding="utf-8", newline="") as f:
    w = csv.writer(f)
    w.writerow(["source", "target"])
    w.writerows(zip(sides["en"], sides["de"]))
PY
N=$(wc -l < "$W/test.en")
fairseq-preprocess -s en -t de --srcdict "$MODEL/dict.en.txt" --tgtdict "$MODEL/dict.de.txt" \
  --testpref "$W/test" --destdir "$W/bin" --workers 1 > /dev/null 2>&1

t0=$(date +%s.%N)
fairseq-generate "$W/bin" --path "$MODEL/model.pt" -s en -t de --gen-subset test --cpu \
  --score-reference --batch-size "$BATCH" > "$W/fairseq.txt" 2>&1
t1=$(date +%s.%N)
"$ROOT/target/release/tchseq" --threads "$THREADS" --device cpu score -m "$MODEL" --tokenized \
  --input "$W/pairs.csv" --output "$W/tchseq.csv" --batch-size "$BATCH" -q
t2=$(date +%s.%N)
python - "$N" "$t0" "$t1" "$t2" "$W/fairseq.txt" "$W/tchseq.csv" <<'PY'
import csv, math, sys
n, t0, t1, t2 = int(sys.argv[1]), *map(float, sys.argv[2:5])
h = {int(l.split("\t")[0][2:]): float(l.split("\t")[1]) for l in open(sys.argv[5]) if l.startswith("H-")}
rows = list(csv.DictReader(open(sys.argv[6], encoding="utf-8")))
diff = max(abs(float(r["avg_logprob"]) - h[i] * math.log(2)) for i, r in enumerate(rows))
fs, ts = n / (t1 - t0), n / (t2 - t1)
print(f"{n} pairs: fairseq-generate --score-reference {fs:.1f} rows/s ({t1-t0:.2f}s), "
      f"tchseq score {ts:.1f} rows/s ({t2-t1:.2f}s), speed-up {ts/fs:.2f}x; max |avg_logprob diff| {diff:.2e}")
PY
