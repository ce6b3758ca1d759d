#!/usr/bin/env bash
# fairseq 0.12.2 goldens for the bundled model weights/multi30k.en-de (end-to-end translate on raw
# text, and --score-reference). Runs against the committed checkpoint; writes tests/fixtures/bundled/.
#   bash reference/bundled_goldens.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh   # OMP_NUM_THREADS=1

DATA=${DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data/multi30k}
M=weights/multi30k.en-de
G=tests/fixtures/bundled
SR=$G/score_reference
mkdir -p "$G" "$SR"
# fairseq's CLIs log to stdout; the goldens keep everything else exactly as printed.
drop_log() { grep -v -E '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| [A-Z]+ \| ' || true; }

# 30 Multi30k test sentences + hand-written ones (punctuation, quotes, numbers, hyphens, non-ASCII).
{ gzip -dc "$DATA/test_2016_flickr.en.gz" | sed -n 1,30p; cat reference/multi30k/extra_inputs.en; } > "$G/input.en"

interactive() {
  fairseq-interactive "$M" --path "$M/model.pt" --cpu -s en -t de \
    --tokenizer moses --bpe subword_nmt --bpe-codes "$M/bpecodes" --beam 5 "$@" < "$G/input.en" | drop_log
}
interactive --buffer-size 1024 --batch-size 16 > "$G/interactive_batch16.txt"
interactive --batch-size 1 > "$G/interactive_batch1.txt"
# fairseq's --remove-bpe: S- and H- lines without the subword marks
interactive --buffer-size 1024 --batch-size 16 --remove-bpe > "$G/interactive_batch16_remove_bpe.txt"
# a fairseq-interactive command line as scripts write it (tchseq translate takes the same flags;
# FAIRSEQ_ARGV is shared with reference/parity.py): no-ops, a negative number, aliases
FAIRSEQ_ARGV=(--lenpen 0.6 --unkpen -0.5 --log-format simple --no-progress-bar --skip-invalid-size-inputs-valid-test
  --dataset-impl raw --num-workers 0 --bf16 --max-sentences 16 --buffer-size 1024
  --print-alignment hard --nbest 2)
interactive "${FAIRSEQ_ARGV[@]}" > "$G/interactive_fairseq_argv.txt"

# --score-reference on the first 100 test_2016_flickr pairs, tokenized + BPE'd as training did.
for l in en de; do
  gzip -dc "$DATA/test_2016_flickr.$l.gz" | sed -n 1,100p \
    | python reference/multi30k/moses_tok.py "$l" 2>/dev/null \
    | subword-nmt apply-bpe -c "$M/bpecodes" > "$SR/test.bpe.$l"
done
rm -rf "$SR/data-bin"
fairseq-preprocess --source-lang en --target-lang de --srcdict "$M/dict.en.txt" --tgtdict "$M/dict.de.txt" \
  --testpref "$SR/test.bpe" --destdir "$SR/data-bin" --workers 1 > /dev/null
rm -f "$SR/data-bin/preprocess.log"
fairseq-generate "$SR/data-bin" --path "$M/model.pt" --cpu -s en -t de --gen-subset test \
  --score-reference --batch-size 1 | drop_log > "$G/score_reference.txt"
