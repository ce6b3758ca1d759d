#!/usr/bin/env bash
# fairseq 0.12.2 goldens for --unkpen and for its other searches (DiverseBeamSearch, DiverseSiblingsSearch,
# LengthConstrainedBeamSearch, LexicallyConstrainedBeamSearch) and --prefix-size, on the bundled
# model and its 40 raw-text inputs (with constraints after tabs in constraints.en): writes tests/fixtures/decoding/.
#   bash reference/decoding_goldens.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh   # OMP_NUM_THREADS=1

M=weights/multi30k.en-de
G=tests/fixtures/decoding
mkdir -p "$G"
drop_log() { grep -v -E '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| [A-Z]+ \| ' || true; }
interactive() {
  fairseq-interactive "$M" --path "$M/model.pt" --cpu -s en -t de --tokenizer moses --bpe subword_nmt \
    --bpe-codes "$M/bpecodes" --buffer-size 1024 --batch-size 16 "$@" < "${INPUT:-tests/fixtures/bundled/input.en}" | drop_log
}
interactive --beam 6 --diverse-beam-groups 3 --nbest 3 > "$G/diverse_beam_g3_nbest3.txt"
interactive --beam 4 --diverse-beam-groups 2 --diverse-beam-strength 0.3 --nbest 2 > "$G/diverse_beam_g2_s0.3_nbest2.txt"
interactive --beam 5 --diversity-rate 0.3 --nbest 2 > "$G/diversity_rate0.3_nbest2.txt"
interactive --beam 5 --prefix-size 2 > "$G/prefix_size2.txt"
interactive --beam 5 --match-source-len --nbest 2 > "$G/match_source_len_nbest2.txt"
# a reward for <unk> large enough that it competes: --unkpen changes hypotheses here (on the
# fixtures' option set beam5_minlen3_maxlen_unkpen2, <unk> never competes)
interactive --beam 5 --nbest 2 --unkpen -9 > "$G/unkpen-9_nbest2.txt"
export INPUT=$G/constraints.en
interactive --beam 5 --nbest 2 --constraints > "$G/constraints_ordered_nbest2.txt"
interactive --beam 5 --nbest 2 --constraints unordered > "$G/constraints_unordered_nbest2.txt"
interactive --beam 4 --constraints unordered --batch-size 1 --buffer-size 1 > "$G/constraints_unordered_batch1.txt"
interactive --beam 6 --nbest 3 --lenpen 0.6 --constraints ordered > "$G/constraints_ordered_lenpen0.6_nbest3.txt"
unset INPUT
# fairseq-generate takes --prefix-size tokens of each reference target (the bundled model's 100
# binarized test pairs)
SR=tests/fixtures/bundled/score_reference
fairseq-generate "$SR/data-bin" --path "$M/model.pt" --cpu -s en -t de --gen-subset test \
  --beam 5 --nbest 2 --prefix-size 2 --batch-size 16 | drop_log > "$G/generate_prefix_size2_nbest2.txt"
echo "wrote $G"
