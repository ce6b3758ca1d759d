#!/usr/bin/env bash
# Builds the bundled demo model weights/multi30k.en-de/ from the raw Multi30k data, then its
# goldens (reference/bundled_goldens.sh). Training is not bit-reproducible run to run, so the
# committed checkpoint is the one the committed goldens were made with.
#
#   bash reference/train_multi30k.sh           # everything (~1 h of training on 2 cores)
#   STAGE=prep bash reference/train_multi30k.sh   # data prep only
#   STAGE=train|ship|eval|goldens ...             # a single stage
#
# Env: DATA (raw multi30k dir), WORK (scratch, default reference/work/multi30k), THREADS (1:
#      on a loaded 2-core machine one intra-op thread trained 2.5x faster than two),
#      NICE (15), MAX_EPOCH (30), STOP_HOURS (1.3), SEED (1), MERGES (8000), RESUME (0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh

DATA=${DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data/multi30k}
WORK=${WORK:-reference/work/multi30k}
OUT=weights/multi30k.en-de
THREADS=${THREADS:-1}
NICE=${NICE:-15}
MAX_EPOCH=${MAX_EPOCH:-30}
STOP_HOURS=${STOP_HOURS:-1.3}
SEED=${SEED:-1}
MERGES=${MERGES:-8000}
STAGE=${STAGE:-all}
SPLITS="train val test_2016_flickr test_2017_flickr"

run() { [ "$STAGE" = all ] || [ "$STAGE" = "$1" ]; }
mkdir -p "$WORK/raw" "$WORK/tok" "$WORK/bpe" "$OUT"

if run prep; then
  for s in $SPLITS; do
    for l in en de; do
      gzip -dc "$DATA/$s.$l.gz" > "$WORK/raw/$s.$l"
      python reference/multi30k/moses_tok.py "$l" < "$WORK/raw/$s.$l" > "$WORK/tok/$s.$l" 2>/dev/null &
    done
    wait
  done
  # One joint BPE on the tokenized (cased) training text of both languages.
  cat "$WORK/tok/train.en" "$WORK/tok/train.de" | subword-nmt learn-bpe -s "$MERGES" > "$OUT/bpecodes"
  for s in $SPLITS; do
    for l in en de; do
      subword-nmt apply-bpe -c "$OUT/bpecodes" < "$WORK/tok/$s.$l" > "$WORK/bpe/$s.$l" &
    done
    wait
  done
  rm -rf "$WORK/data-bin"
  fairseq-preprocess --source-lang en --target-lang de --joined-dictionary \
    --trainpref "$WORK/bpe/train" --validpref "$WORK/bpe/val" \
    --testpref "$WORK/bpe/test_2016_flickr,$WORK/bpe/test_2017_flickr" \
    --destdir "$WORK/data-bin" --workers 2
  cp "$WORK/data-bin/dict.en.txt" "$WORK/data-bin/dict.de.txt" "$OUT/"
fi

if run train; then
  # RESUME=1 continues from checkpoint_last.pt; --stop-time-hours counts cumulative training time.
  [ "${RESUME:-0}" = 1 ] || rm -rf "$WORK/checkpoints"
  # --tokenizer/--bpe are stored in the checkpoint's cfg so hub-style loaders know the pipeline.
  OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS nice -n "$NICE" \
    fairseq-train "$WORK/data-bin" --cpu --seed "$SEED" --num-workers 0 \
    --source-lang en --target-lang de \
    --arch transformer --share-all-embeddings \
    --encoder-embed-dim 128 --encoder-ffn-embed-dim 512 --encoder-layers 3 --encoder-attention-heads 4 \
    --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-layers 3 --decoder-attention-heads 4 \
    --dropout 0.2 \
    --optimizer adam --adam-betas '(0.9, 0.98)' --lr 2e-3 \
    --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-07 \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-tokens 4096 --max-epoch "$MAX_EPOCH" --stop-time-hours "$STOP_HOURS" \
    --tokenizer moses --bpe subword_nmt --bpe-codes "$OUT/bpecodes" \
    --save-dir "$WORK/checkpoints" --no-epoch-checkpoints \
    --log-format simple --log-interval 25 \
    2>&1 | tee -a "$WORK/train.log"
fi

if run ship; then
  # checkpoint_best (lowest valid loss) without the optimizer state: still a plain fairseq checkpoint.
  python reference/multi30k/strip_checkpoint.py "$WORK/checkpoints/checkpoint_best.pt" "$OUT/model.pt"
fi

if run eval; then
  bash reference/multi30k/eval_bleu.sh "$WORK" | tee "$WORK/bleu.txt"
fi

if run goldens; then
  bash reference/bundled_goldens.sh
fi
