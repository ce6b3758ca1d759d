#!/usr/bin/env bash
# fairseq 0.12.2 goldens for --no-repeat-ngram-size 1, 2, 3 and 4 (and 0, the same run without
# it), beam search and sampling, on the bundled model, two fixture models (tests/fixtures/models:
# postnorm, prenorm) and both language models (tests/fixtures/lm), plus the bug report's sentence.
# Writes tests/fixtures/ngram/<model>/<set>.ngram<N>.txt and tests/fixtures/ngram/manifest.json
# (argv, stdin, notes, exit code of each golden; `probe`: what fairseq's blocker did in each run,
# counted by reference/ngram_probe.py). See tests/fixtures/ngram/README.md.
#   bash reference/ngram_goldens.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh      # OMP_NUM_THREADS=1
source reference/record.sh   # record, start_manifest

WORK=${WORK:-reference/work/ngram}
NICE=${NICE:-15}
NICE_CMD=(nice -n "$NICE")
FIX=tests/fixtures/ngram
SIZES="0 1 2 3 4"
mkdir -p "$WORK" "$FIX"
start_manifest
PROBES="$WORK/probes.jsonl"
rm -f "$PROBES"

# one golden per size: NAME SET STDIN NOTES ARGV... (argv without --no-repeat-ngram-size); the
# same argv run again under reference/ngram_probe.py counts what fairseq's blocker did
sizes() {
  local dir=$1 set=$2 input=$3 notes=$4; shift 4
  mkdir -p "$FIX/$dir"
  for n in $SIZES; do
    local ngram=() golden="$FIX/$dir/$set.ngram$n.txt"
    [ "$n" = 0 ] || ngram=(--no-repeat-ngram-size "$n")
    record stdout "$golden" "$input" "$notes" "$@" "${ngram[@]}"
    if [ "$n" != 0 ]; then
      local stdin=$input
      [ "$stdin" = - ] && stdin=/dev/null
      "${NICE_CMD[@]}" python reference/ngram_probe.py "$WORK/probe.json" "$@" "${ngram[@]}" < "$stdin" > /dev/null 2>&1
      python -I -c 'import json, sys; p = json.load(open(sys.argv[2])); print(json.dumps({"golden": sys.argv[1], "blocker": p["blocker"]}))' \
        "$golden" "$WORK/probe.json" >> "$PROBES"
    fi
  done
}

# the bundled model on raw text (tests/fixtures/bundled/input.en, 40 lines)
M=weights/multi30k.en-de
B=(fairseq-interactive "$M" --path "$M/model.pt" --cpu -s en -t de --tokenizer moses --bpe subword_nmt
   --bpe-codes "$M/bpecodes")
IN=tests/fixtures/bundled/input.en
BATCHED=(--buffer-size 1024 --batch-size 16)
sizes bundled beam5_nbest2 "$IN" "bundled model, stdin = $IN (raw)" "${B[@]}" "${BATCHED[@]}" --beam 5 --nbest 2
# p = 0.6 as reference/sampling_goldens.sh (stable under every kernel setting tried there)
sizes bundled sampling_topp0.6_beam3 "$IN" "bundled model, stdin = $IN (raw)" \
  "${B[@]}" "${BATCHED[@]}" --sampling --seed 1 --sampling-topp 0.6 --beam 3 --nbest 3
# the bug report: fairseq-interactive's defaults (beam 5, one line at a time)
echo "Two dogs play ." > "$FIX/report.en"
SIZES="1" sizes bundled report "$FIX/report.en" "the bug report's sentence, fairseq-interactive's defaults" "${B[@]}"

# two fixture models (the synthetic task of reference/fixtures.sh), tests/fixtures/models/inputs.src
for fx in postnorm prenorm; do
  D=tests/fixtures/models/$fx
  F=(fairseq-interactive "$D" --path "$D/model.pt" -s src -t tgt --cpu --input tests/fixtures/models/inputs.src)
  sizes "$fx" beam5 - "fixture $fx, --input tests/fixtures/models/inputs.src" "${F[@]}" --beam 5 "${BATCHED[@]}"
  sizes "$fx" sampling_topk5 - "fixture $fx, --input tests/fixtures/models/inputs.src" \
    "${F[@]}" --sampling --sampling-topk 5 --beam 3 --nbest 3 --seed 1 "${BATCHED[@]}"
done

# the language models: continuations of tests/fixtures/lm/prompts.en (reference/lm_goldens.sh's runs)
for m in lm-postnorm lm-gpt; do
  D=tests/fixtures/lm/$m
  bos=()
  [ "$m" = lm-gpt ] && bos=(--add-bos-token)
  L=(fairseq-interactive "$D" --task language_modeling --path "$D/model.pt" --cpu --tokenizer moses
     --bpe subword_nmt --bpe-codes "$D/bpecodes" "${bos[@]}")
  P=tests/fixtures/lm/prompts.en
  sizes "$m" beam5_nbest2 "$P" "language model $m, stdin = $P (raw)" "${L[@]}" "${BATCHED[@]}" --beam 5 --nbest 2 --max-len-b 20
  sizes "$m" sampling_topk10 "$P" "language model $m, stdin = $P (raw)" \
    "${L[@]}" "${BATCHED[@]}" --sampling --sampling-topk 10 --seed 1 --beam 2 --nbest 2 --max-len-b 20
done

python -I reference/write_manifest.py "$MANIFEST_LINES" "$FIX/manifest.json" --fields argv,input,kind,notes,exit_code \
  --made-by "bash reference/ngram_goldens.sh (fairseq 0.12.2, torch 2.13, CPU fp32, OMP_NUM_THREADS=1, cwd = repository root)" \
  --kinds '{"stdout": "fairseq-interactive: stdout verbatim (log lines, on stderr, dropped)"}'
# what fairseq's blocker did in each run (reference/ngram_probe.py), beside the goldens
python -I - "$PROBES" "$FIX/manifest.json" <<'EOF'
import json, sys
probes = {}
for line in open(sys.argv[1]):
    row = json.loads(line)
    probes[row["golden"]] = row["blocker"]
m = json.load(open(sys.argv[2]))
m["probe"] = {
    "what": "reference/ngram_probe.py: the same argv with NGramRepeatBlock.forward wrapped; per n: "
            "use_extension (the CUDA kernel), calls, max_step, token_widths (the width of the `tokens` "
            "it gets: max_len + 2), bans (the (row, token) bans its loop made), finite_lprobs_banned "
            "(log-probabilities it turned from finite to -inf), rows_with_pad_in_hypothesis",
    "runs": probes,
}
json.dump(m, open(sys.argv[2], "w"), indent=1)
EOF
echo "wrote $FIX"
