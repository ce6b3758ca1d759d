#!/usr/bin/env bash
# The transformer-base-size model of `make bench` (git-ignored, never committed): fairseq's
# `transformer` arch (d512, 6+6 layers, 8 heads, FFN 2048, shared embeddings) with a 32,000-type
# joint dictionary (a 32k-merge joint BPE on Multi30k, padded to 32,000 types with fairseq's own
# --padding-factor), trained UPDATES updates on Multi30k. That is not enough for real translations
# (its output is degenerate), so bench.py decodes a fixed number of tokens per sentence at this size.
# At this size arithmetic dominates: the comparison is about kernels and batching.
#   bash bench/make_base.sh OUT_DIR        # UPDATES=230 (one epoch at --max-tokens 2048), THREADS=2
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
cd "$ROOT"
source reference/env.sh
DATA=${DATA:-$(cd "$ROOT/.." && pwd)/shared/data/multi30k}
UPDATES=${UPDATES:-230}
THREADS=${THREADS:-2}
W="$OUT/work"
mkdir -p "$W"
for s in train val; do
  for l in en de; do
    [ -s "$W/$s.tok.$l" ] || gzip -dc "$DATA/$s.$l.gz" | python reference/multi30k/moses_tok.py "$l" > "$W/$s.tok.$l" 2>/dev/null
  done
done
[ -s "$OUT/bpecodes" ] || cat "$W/train.tok.en" "$W/train.tok.de" | subword-nmt learn-bpe -s 32000 > "$OUT/bpecodes"
for s in train val; do
  for l in en de; do
    subword-nmt apply-bpe -c "$OUT/bpecodes" < "$W/$s.tok.$l" > "$W/$s.bpe.$l"
  done
done
rm -rf "$W/bin"
fairseq-preprocess -s en -t de --joined-dictionary --padding-factor 32000 \
  --trainpref "$W/train.bpe" --validpref "$W/val.bpe" --destdir "$W/bin" --workers 2 > "$W/preprocess.log"
start=$(date +%s)
OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS fairseq-train "$W/bin" --cpu --seed 1 --num-workers 0 \
  -s en -t de --arch transformer --share-all-embeddings \
  --dropout 0.1 --optimizer adam --adam-betas '(0.9, 0.98)' --lr 1e-3 \
  --lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-07 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens 2048 --max-update "$UPDATES" --no-epoch-checkpoints --no-save-optimizer-state \
  --save-dir "$W/checkpoints" --log-format simple --log-interval 25 > "$W/train.log" 2>&1
end=$(date +%s)
cp "$W/checkpoints/checkpoint_last.pt" "$OUT/model.pt"
cp "$W/bin/dict.en.txt" "$W/bin/dict.de.txt" "$OUT/"
types=$(( $(wc -l < "$OUT/dict.en.txt") + 4 ))
printf '{"dict": %d, "updates": %d, "threads": %d, "train_seconds": %d}\n' "$types" "$UPDATES" "$THREADS" "$((end - start))" > "$OUT/info.json"
cat "$OUT/info.json"
