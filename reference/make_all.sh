#!/usr/bin/env bash
# Regenerates all ground truth with fairseq 0.12.2 (`make reference`). One script per part, so
# each part can be rerun alone:
#   reference/fixtures.sh       tiny synthetic models + goldens, wild checkpoint goldens
#   reference/text_goldens.sh   text-pipeline goldens (if present)
#   reference/alignment_goldens.sh  --print-alignment goldens for the fixtures
#   reference/train_multi30k.sh the bundled Multi30k model (if present)
#     (ends with reference/bundled_goldens.sh: goldens of the committed bundled model)
#   reference/sampling_goldens.sh  top-p sampling goldens of the bundled model
#   reference/ngram_goldens.sh     --no-repeat-ngram-size 1..4 goldens (bundled, fixtures, LMs)
#   reference/fairseq_flags.py  the options of fairseq-interactive/-generate (tests/fixtures/fairseq_flags.tsv)
set -euo pipefail
REF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for part in fixtures alignment_goldens text_goldens train_multi30k sampling_goldens ngram_goldens; do
    script="$REF/$part.sh"
    if [ -f "$script" ]; then
        echo "== reference/$part.sh"
        bash "$script"
    fi
done
echo "== reference/fairseq_flags.py"
(source "$REF/env.sh" && cd "$REF/.." && python reference/fairseq_flags.py > tests/fixtures/fairseq_flags.tsv)
