#!/usr/bin/env bash
# Two tiny fairseq 0.12.2 language models (`--task language_modeling`) trained on English
# Multi30k, shipped hub-style to tests/fixtures/lm/<name>/, plus fairseq's own outputs for them
# (fairseq-eval-lm, fairseq-interactive, activation tensors). See tests/fixtures/lm/README.md.
#
#   bash reference/lm_goldens.sh                 # everything (~10 min on 2 loaded cores)
#   STAGE=prep|train|ship|goldens|tensors bash reference/lm_goldens.sh   # a single stage
#   MODELS="lm-gpt" ...                          # a subset of the models
#
# Training is not bit-reproducible run to run, so the committed model.pt is the one the committed
# goldens were made with: rerunning `train` + `ship` replaces both, `goldens`/`tensors` alone
# regenerate the goldens for the committed checkpoints.
#
# Env: DATA (raw multi30k dir), WORK (scratch, default reference/work/lm), NICE (15), SEED (1),
#      MAX_UPDATE (500).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh   # OMP_NUM_THREADS=1, sitecustomize fixes (numpy 2 aliases: fix 4)
source reference/record.sh   # record, start_manifest, goldens_dir

DATA=${DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data/multi30k}
WORK=${WORK:-reference/work/lm}
NICE=${NICE:-15}
SEED=${SEED:-1}
MAX_UPDATE=${MAX_UPDATE:-500}
STAGE=${STAGE:-all}
MODELS=${MODELS:-"lm-postnorm lm-gpt"}
BPECODES=weights/multi30k.en-de/bpecodes
FIX=tests/fixtures/lm
SPLITS="train val test_2016_flickr"
NICE_CMD=(nice -n "$NICE")

run() { [ "$STAGE" = all ] || [ "$STAGE" = "$1" ]; }
mkdir -p "$WORK/raw" "$WORK/tok" "$WORK/bpe" "$FIX"

# moses tokenize + subword-nmt BPE, exactly as `--tokenizer moses --bpe subword_nmt` encode.
tok_bpe() { python reference/multi30k/moses_tok.py en 2>/dev/null | subword-nmt apply-bpe -c "$BPECODES"; }

if run prep; then
  for s in $SPLITS; do
    gzip -dc "$DATA/$s.en.gz" > "$WORK/raw/$s.en"
    "${NICE_CMD[@]}" python reference/multi30k/moses_tok.py en < "$WORK/raw/$s.en" > "$WORK/tok/$s.en" 2>/dev/null
    "${NICE_CMD[@]}" subword-nmt apply-bpe -c "$BPECODES" < "$WORK/tok/$s.en" > "$WORK/bpe/$s.en"
  done
  rm -rf "$WORK/data-bin"
  "${NICE_CMD[@]}" fairseq-preprocess --only-source \
    --trainpref "$WORK/bpe/train.en" --validpref "$WORK/bpe/val.en" \
    --testpref "$WORK/bpe/test_2016_flickr.en" \
    --destdir "$WORK/data-bin" --workers 1

  # Golden inputs (committed): 120 raw test_2016 lines; 40 prompts = the first 3..6 words of
  # test_2017_flickr lines 1..40 (line i keeps 3 + (i-1) % 4 words).
  gzip -dc "$DATA/test_2016_flickr.en.gz" | sed -n 1,120p > "$FIX/input.en"
  gzip -dc "$DATA/test_2017_flickr.en.gz" | sed -n 1,40p \
    | awk '{ n = 3 + (NR - 1) % 4; if (n > NF) n = NF; s = $1; for (i = 2; i <= n; i++) s = s " " $i; print s }' \
    > "$FIX/prompts.en"
  # input.en through the same pipeline, binarized with the LM dictionary as the `test` split.
  tok_bpe < "$FIX/input.en" > "$WORK/bpe/input.en"
  rm -rf "$WORK/eval-bin"
  fairseq-preprocess --only-source --srcdict "$WORK/data-bin/dict.txt" \
    --testpref "$WORK/bpe/input.en" --destdir "$WORK/eval-bin" --workers 1 > /dev/null 2>&1
  rm -f "$WORK/eval-bin/preprocess.log"
  # 3 lines whose middle one (input.en lines 1-5 joined: 74 BPE tokens + eos) is longer than the
  # models' 64 positions: shows what eval-lm does with an over-long sentence.
  { sed -n 6p "$FIX/input.en"; sed -n 1,5p "$FIX/input.en" | paste -sd ' '; sed -n 7p "$FIX/input.en"; } > "$FIX/input_long.en"
  tok_bpe < "$FIX/input_long.en" > "$WORK/bpe/input_long.en"
  rm -rf "$WORK/long-bin"
  fairseq-preprocess --only-source --srcdict "$WORK/data-bin/dict.txt" \
    --testpref "$WORK/bpe/input_long.en" --destdir "$WORK/long-bin" --workers 1 > /dev/null 2>&1
  rm -f "$WORK/long-bin/preprocess.log"
fi

# Common training flags. --tokenizer/--bpe are stored in the checkpoint's cfg so hub-style
# loaders know the text pipeline.
train_common=(
  "$WORK/data-bin" --task language_modeling --cpu --seed "$SEED" --num-workers 0
  --decoder-embed-dim 64 --decoder-ffn-embed-dim 128 --decoder-layers 2 --decoder-attention-heads 4
  --share-decoder-input-output-embed --tokens-per-sample 64 --dropout 0.1
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 5e-3
  --lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-07
  --max-tokens 2048 --max-update "$MAX_UPDATE" --skip-invalid-size-inputs-valid-test
  --tokenizer moses --bpe subword_nmt --bpe-codes "$BPECODES"
  --no-epoch-checkpoints --log-format simple --log-interval 50
)
# lm-postnorm: `--arch transformer_lm` is the bare dataclass config (its arch function is a no-op,
#   fairseq/models/__init__.py:151-153): post-norm, no final decoder layer norm, relu, sinusoidal
#   positions, and decoder_input_dim = decoder_output_dim = 512 unless given (dataclass defaults),
#   i.e. project_in_dim/project_out_dim around the 64-wide layers. Those dims are set to 96 here:
#   the projections stay covered and model.pt small. Default --sample-break-mode none.
# lm-gpt: `--arch transformer_lm_gpt` (base_lm_architecture: pre-norm + final layer norm, gelu,
#   attention dropout 0.1, input/output dims = embed dim) plus --decoder-learned-pos (the arch
#   keeps sinusoidal positions), --add-bos-token, --sample-break-mode eos.
train_cmd() {
  case "$1" in
    lm-postnorm) echo "fairseq-train --arch transformer_lm --decoder-input-dim 96 --decoder-output-dim 96" ;;
    lm-gpt) echo "fairseq-train --arch transformer_lm_gpt --decoder-learned-pos --add-bos-token --sample-break-mode eos" ;;
    *) echo "unknown model $1" >&2; return 1 ;;
  esac
}

if run train; then
  for m in $MODELS; do
    rm -rf "$WORK/ckpt/$m"
    mkdir -p "$WORK/ckpt/$m"
    # shellcheck disable=SC2046
    "${NICE_CMD[@]}" $(train_cmd "$m") "${train_common[@]}" --save-dir "$WORK/ckpt/$m" \
      > "$WORK/ckpt/$m/train.log" 2>&1
    tail -n 3 "$WORK/ckpt/$m/train.log"
  done
fi

if run ship; then
  for m in $MODELS; do
    mkdir -p "$FIX/$m"
    # checkpoint_last (the final update) without the optimizer state: still a plain fairseq checkpoint.
    python reference/multi30k/strip_checkpoint.py "$WORK/ckpt/$m/checkpoint_last.pt" "$FIX/$m/model.pt"
    cp "$WORK/data-bin/dict.txt" "$FIX/$m/dict.txt"
    cp "$BPECODES" "$FIX/$m/bpecodes"
    cp "$WORK/ckpt/$m/train.log" "$WORK/train-$m.log"
  done
fi

# fairseq's log lines ("YYYY-MM-DD HH:MM:SS | LEVEL | logger | message") go to stderr:
# fairseq/tasks/text_to_speech.py:23 calls logging.basicConfig() (stderr) at import, before
# eval_lm.py:28 asks for stdout, which is then a no-op.

# eval-lm's results are log lines: its goldens are `record log` (Python warnings on stderr are
# dropped), the interactive ones `record stdout` (S-/W-/H-/D-/P- lines).
if run goldens; then
  start_manifest
  for m in $MODELS; do
    M=$FIX/$m G=$(goldens_dir "$FIX/$m")
    # The CLIs build the task from the command line, not from the checkpoint: lm-gpt was trained
    # with --add-bos-token, so its runs pass it too (eval-lm then also strips the bos score).
    bos=()
    [ "$m" = lm-gpt ] && bos=(--add-bos-token)
    ev=(fairseq-eval-lm "$WORK/eval-bin" --path "$M/model.pt" --gen-subset test --cpu --output-word-probs "${bos[@]}")
    EB=$WORK/eval-bin
    note="eval-lm on $EB (test split = $FIX/input.en, moses + subword_nmt BPE + $M/dict.txt)"
    record log "$G/eval_lm_eos.txt" - "$note" "${ev[@]}" --batch-size 16 --sample-break-mode eos
    record log "$G/eval_lm_eos_bs1.txt" - "$note" "${ev[@]}" --batch-size 1 --sample-break-mode eos
    record log "$G/eval_lm_none_tps32.txt" - "$note" "${ev[@]}" --batch-size 16 --sample-break-mode none --tokens-per-sample 32
    record log "$G/eval_lm_none_tps32_cw16.txt" - "$note" "${ev[@]}" --batch-size 16 --sample-break-mode none --tokens-per-sample 32 --context-window 16
    record log "$G/eval_lm_eos_remove_bpe.txt" - "$note; --remove-bpe = --post-process subword_nmt" "${ev[@]}" --batch-size 16 --sample-break-mode eos --remove-bpe
    # With --add-bos-token (lm-gpt) a 64-token complete block becomes 65 positions: fairseq fails
    # (IndexError in the learned positional embedding); tps 48 is the same mode without that.
    record log "$G/eval_lm_complete_tps64.txt" - "$note" "${ev[@]}" --batch-size 16 --sample-break-mode complete --tokens-per-sample 64
    record log "$G/eval_lm_complete_tps48.txt" - "$note" "${ev[@]}" --batch-size 16 --sample-break-mode complete --tokens-per-sample 48
    # --remove-bpe alone gives post_process "subword_nmt", which eval_lm.py:89-90 turns into the
    # continuation marker "subword_nmt".rstrip() (no token ends with it: nothing is merged); the
    # literal "@@ " is the value that merges BPE pieces into words.
    record log "$G/eval_lm_eos_remove_bpe_at.txt" - "$note; --remove-bpe '@@ ' (the value eval-lm's merging code expects)" "${ev[@]}" --batch-size 16 --sample-break-mode eos --remove-bpe '@@ '
    # Over-long sentence (75 tokens > 64 positions): data-bin test split = $FIX/input_long.en.
    evl=(fairseq-eval-lm "$WORK/long-bin" "${ev[@]:2}")
    lnote="eval-lm on $WORK/long-bin (test split = $FIX/input_long.en: its line 2 is 75 tokens with eos)"
    record log "$G/eval_lm_long_eos.txt" - "$lnote" "${evl[@]}" --batch-size 16 --sample-break-mode eos
    record log "$G/eval_lm_long_complete_tps64.txt" - "$lnote" "${evl[@]}" --batch-size 16 --sample-break-mode complete --tokens-per-sample 64
    record log "$G/eval_lm_long_none_tps32.txt" - "$lnote" "${evl[@]}" --batch-size 16 --sample-break-mode none --tokens-per-sample 32

    it=(fairseq-interactive "$M" --task language_modeling --path "$M/model.pt" --cpu
        --tokenizer moses --bpe subword_nmt --bpe-codes "$M/bpecodes" "${bos[@]}")
    P=$FIX/prompts.en
    inote="interactive, stdin = $P (raw)"
    record stdout "$G/interactive_beam5_nbest2.txt" "$P" "$inote" "${it[@]}" --buffer-size 1024 --batch-size 16 --beam 5 --nbest 2 --max-len-b 20
    record stdout "$G/interactive_beam5_bs1.txt" "$P" "$inote" "${it[@]}" --beam 5 --max-len-b 20 --batch-size 1 --buffer-size 1
    record stdout "$G/interactive_greedy.txt" "$P" "$inote" "${it[@]}" --buffer-size 1024 --batch-size 16 --beam 1 --max-len-b 20
    record stdout "$G/interactive_sampling_topk10.txt" "$P" "$inote" "${it[@]}" --buffer-size 1024 --batch-size 16 --sampling --sampling-topk 10 --seed 1 --beam 2 --nbest 2 --max-len-b 20
    record stdout "$G/interactive_beam4_lenpen_norepeat.txt" "$P" "$inote" "${it[@]}" --buffer-size 1024 --batch-size 16 --beam 4 --lenpen 0.6 --no-repeat-ngram-size 2 --max-len-b 20
  done
  python -I reference/write_manifest.py "$MANIFEST_LINES" "$FIX/manifest.json" --fields argv,input,kind,notes,exit_code --keep tensors \
    --made-by "bash reference/lm_goldens.sh (fairseq 0.12.2, torch 2.13, CPU fp32, OMP_NUM_THREADS=1, cwd = repository root)" \
    --kinds '{"log": "eval-lm: stdout (empty) then every fairseq log line from stderr, '"'"'YYYY-MM-DD HH:MM:SS | '"'"' prefix removed, i.e. '"'"'LEVEL | logger | message'"'"'; Python warnings dropped", "stdout": "interactive: stdout verbatim (log lines, on stderr, dropped)"}'
fi

if run tensors; then
  for m in $MODELS; do
    "${NICE_CMD[@]}" python reference/lm_tensors.py "$FIX/$m" "$WORK/eval-bin" "$FIX/manifest.json"
  done
fi
