#!/usr/bin/env bash
# fairseq 0.12.2 goldens for top-p sampling (`--sampling --sampling-topp`) on the bundled model and
# its 40 raw-text inputs: two values of p, with and without --sampling-topk (fairseq's Sampling
# search then cuts by p alone), beam 1 and beam > 1, batched and one sentence at a time.
# p is 0.3 and 0.6: with these, fairseq draws the same under every kernel setting tried (native,
# MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2, ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE). At
# p = 0.8 a token of the bundled input's sentence 5 sits at the cut, and the kernels' last bits
# decide whether it is drawn (fairseq and tchseq alike, under each setting).
# Writes tests/fixtures/sampling/.
#   bash reference/sampling_goldens.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh   # OMP_NUM_THREADS=1

M=weights/multi30k.en-de
G=tests/fixtures/sampling
mkdir -p "$G"
drop_log() { grep -v -E '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| [A-Z]+ \| ' || true; }
interactive() {
  fairseq-interactive "$M" --path "$M/model.pt" --cpu -s en -t de --tokenizer moses --bpe subword_nmt \
    --bpe-codes "$M/bpecodes" --sampling --seed 1 "$@" < tests/fixtures/bundled/input.en | drop_log
}
BATCHED=(--buffer-size 1024 --batch-size 16)
interactive "${BATCHED[@]}" --sampling-topp 0.3 --beam 1 > "$G/topp0.3_beam1.txt"
interactive "${BATCHED[@]}" --sampling-topp 0.6 --beam 1 > "$G/topp0.6_beam1.txt"
interactive "${BATCHED[@]}" --sampling-topp 0.6 --beam 3 --nbest 3 > "$G/topp0.6_beam3_nbest3.txt"
interactive "${BATCHED[@]}" --sampling-topp 0.3 --sampling-topk 10 --beam 2 --nbest 2 > "$G/topp0.3_topk10_beam2_nbest2.txt"
interactive --batch-size 1 --buffer-size 1 --sampling-topp 0.6 --beam 2 --nbest 2 > "$G/topp0.6_beam2_nbest2.bs1.txt"
echo "wrote $G"
