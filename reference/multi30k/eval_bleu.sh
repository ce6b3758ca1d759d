#!/usr/bin/env bash
# sacreBLEU of weights/multi30k.en-de on test_2016_flickr (subset test) and test_2017_flickr (test1):
# fairseq-generate, beam 5, detokenized D- lines (bpe removed, Moses-detokenized) in input order,
# scored against the raw references.  Usage: bash eval_bleu.sh WORK   (WORK has data-bin/ and raw/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source reference/env.sh
WORK=$1
M=weights/multi30k.en-de
THREADS=${THREADS:-2}
for pair in test:test_2016_flickr test1:test_2017_flickr; do
  subset=${pair%%:*}; name=${pair#*:}
  OMP_NUM_THREADS=$THREADS nice -n "${NICE:-15}" fairseq-generate "$WORK/data-bin" --path "$M/model.pt" --cpu \
    -s en -t de --gen-subset "$subset" --beam 5 --batch-size 128 --remove-bpe \
    --tokenizer moses --bpe subword_nmt --bpe-codes "$M/bpecodes" > "$WORK/gen.$name.txt" 2>/dev/null
  grep -P '^D-[0-9]+\t' "$WORK/gen.$name.txt" | sed 's/^D-//' | sort -n -k1,1 | cut -f3 > "$WORK/hyp.$name.de"
  printf '%s\t' "$name"
  sacrebleu "$WORK/raw/$name.de" -i "$WORK/hyp.$name.de" -m bleu -f text -w 2
done
