#!/usr/bin/env bash
# Four tiny fairseq 0.12.2 models of the multilingual / BART families, trained on Multi30k
# (en, de, fr) and shipped model-dir style to tests/fixtures/multilingual/<name>/, plus fairseq's
# own outputs for them (fairseq-interactive, fairseq-generate --score-reference, activation
# tensors). See tests/fixtures/multilingual/README.md.
#
#   m2m       M2M-100 style: translation_multi_simple_epoch, transformer_wmt_en_de_big (tiny),
#             pre-norm, __xx__ language tokens, --lang-dict (order fr,en,de), --fixed-dictionary
#   mbart50   mBART-50 style: translation_multi_simple_epoch, mbart_large (tiny), pre-norm,
#             --lang-tok-style mbart ([xx_XX] tokens + <mask>), --langs, per-language dicts
#   bart      translation, bart_base (tiny), en->de
#   mbart-ft  translation_from_pretrained_bart, mbart_large (tiny), pre-norm, en_XX->de_DE
#
#   bash reference/family_goldens.sh                 # everything
#   STAGE=prep|train|init|ship|goldens|tensors bash reference/family_goldens.sh   # one stage
#   MODELS="m2m bart" ...                            # a subset of the models
#
# Training is not bit-reproducible run to run, so the committed model.pt is the one the committed
# goldens were made with: rerunning `train` + `ship` replaces both; `goldens`/`tensors` alone
# regenerate the goldens for the committed checkpoints (they need `prep` for the binarized test
# data of the score-reference runs and verify.pt).
#
# Env: DATA (raw multi30k dir), WORK (scratch, default reference/work/multilingual), NICE (15),
#      SEED (1), MAX_UPDATE (600: mbart-ft), MAX_UPDATE_MULTI (1200: m2m, mbart50, whose updates
#      are shared by 6 directions), MAX_UPDATE_BART (900), VOCAB (4000, sentencepiece).
# lr 5e-3 everywhere except bart (post-norm): at 5e-3 / 600 updates it became a target-side LM
# that ignores the source (the same output for every input); lr 2e-3 / 900 updates does not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh   # OMP_NUM_THREADS=1, sitecustomize fixes (4: numpy 2 aliases, 5: mBART task)
source reference/record.sh   # record, start_manifest, goldens_dir

DATA=${DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data/multi30k}
WORK=${WORK:-reference/work/multilingual}
NICE=${NICE:-15}
SEED=${SEED:-1}
MAX_UPDATE=${MAX_UPDATE:-600}
MAX_UPDATE_MULTI=${MAX_UPDATE_MULTI:-1200}
MAX_UPDATE_BART=${MAX_UPDATE_BART:-900}
VOCAB=${VOCAB:-4000}
STAGE=${STAGE:-all}
MODELS=${MODELS:-"m2m mbart50 bart mbart-ft"}
FIX=tests/fixtures/multilingual
NICE_CMD=(nice -n "$NICE")
NLINES=60   # golden inputs: the first NLINES lines of test_2016_flickr

run() { [ "$STAGE" = all ] || [ "$STAGE" = "$1" ]; }
mkdir -p "$WORK" "$FIX"
SPM=$WORK/spm.model
# mBART language codes of the plain codes
xx() { case "$1" in en) echo en_XX ;; de) echo de_DE ;; fr) echo fr_XX ;; esac; }

if run prep; then
  mkdir -p "$WORK/raw" "$WORK/spm-text"
  for s in train val test_2016_flickr; do
    for l in en de fr; do gzip -dc "$DATA/$s.$l.gz" > "$WORK/raw/$s.$l"; done
  done
  # Golden inputs (committed): the first 60 raw lines of test_2016_flickr per language.
  for l in en de fr; do head -n "$NLINES" "$WORK/raw/test_2016_flickr.$l" > "$FIX/input.$l"; done
  # One shared sentencepiece BPE model (vocab $VOCAB) on the train split of all three languages.
  "${NICE_CMD[@]}" python reference/multilingual_spm.py train "$WORK/spm" "$VOCAB" \
    "$WORK/raw/train.en" "$WORK/raw/train.de" "$WORK/raw/train.fr"
  for l in en de fr; do
    for s in train val; do
      "${NICE_CMD[@]}" python reference/multilingual_spm.py encode "$SPM" < "$WORK/raw/$s.$l" > "$WORK/spm-text/$s.$l"
    done
    "${NICE_CMD[@]}" python reference/multilingual_spm.py encode "$SPM" < "$FIX/input.$l" > "$WORK/spm-text/test.$l"
  done
  # The joined dictionary: fairseq-preprocess on the train split of all three languages
  # (default --padding-factor 8, i.e. madeupword fillers).
  cat "$WORK/spm-text/train.en" "$WORK/spm-text/train.de" "$WORK/spm-text/train.fr" > "$WORK/spm-text/train.all"
  rm -rf "$WORK/dict"
  "${NICE_CMD[@]}" fairseq-preprocess --only-source --dict-only --trainpref "$WORK/spm-text/train.all" \
    --destdir "$WORK/dict" --workers 1 > /dev/null 2>&1
  DICT=$WORK/dict/dict.txt
  # bin: pairs en-de, en-fr, de-fr with plain codes (train, valid = val, test = input.*); the
  # reversed directions read the same files (multilingual_data_manager.load_lang_dataset).
  rm -rf "$WORK/bin" "$WORK/bin-mbart"
  for p in en-de en-fr de-fr; do
    s=${p%-*}; t=${p#*-}
    "${NICE_CMD[@]}" fairseq-preprocess -s "$s" -t "$t" --srcdict "$DICT" --tgtdict "$DICT" \
      --trainpref "$WORK/spm-text/train" --validpref "$WORK/spm-text/val" --testpref "$WORK/spm-text/test" \
      --destdir "$WORK/bin" --workers 1 > /dev/null 2>&1
  done
  # bin-mbart: the same binary files under mBART codes (train.en_XX-de_DE.en_XX, dict.en_XX.txt, ...).
  mkdir -p "$WORK/bin-mbart"
  for f in "$WORK"/bin/*.bin "$WORK"/bin/*.idx "$WORK"/bin/dict.*.txt; do
    b=$(basename "$f")
    for l in en de fr; do b=${b//.$l./.$(xx $l).}; b=${b//.$l-/.$(xx $l)-}; b=${b//-$l./-$(xx $l).}; done
    cp "$f" "$WORK/bin-mbart/$b"
  done
  rm -f "$WORK"/bin/preprocess.log
  printf 'fr\nen\nde\n' > "$WORK/lang_list.txt"
  echo "en-de,de-en,en-fr,fr-en,de-fr,fr-de" > "$WORK/language_pairs.txt"
  echo "en_XX-de_DE,de_DE-en_XX,en_XX-fr_XX,fr_XX-en_XX,de_DE-fr_XX,fr_XX-de_DE" > "$WORK/language_pairs.mbart.txt"
  ls "$WORK/bin" "$WORK/bin-mbart"
  wc -l "$DICT"
fi

# Common training flags. --bpe sentencepiece is stored in the checkpoint's cfg so hub-style
# loaders know the text pipeline.
train_common=(
  --cpu --seed "$SEED" --num-workers 0
  --encoder-embed-dim 64 --encoder-ffn-embed-dim 128 --encoder-layers 2 --encoder-attention-heads 4
  --decoder-embed-dim 64 --decoder-ffn-embed-dim 128 --decoder-layers 2 --decoder-attention-heads 4
  --dropout 0.1 --attention-dropout 0.0 --activation-dropout 0.0
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --optimizer adam --adam-betas '(0.9, 0.98)'
  --lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-07
  --max-tokens 2048 --skip-invalid-size-inputs-valid-test
  --bpe sentencepiece --sentencepiece-model "$SPM"
  --no-epoch-checkpoints --log-format simple --log-interval 50
)
MPAIRS="en_XX-de_DE,de_DE-en_XX,en_XX-fr_XX,fr_XX-en_XX,de_DE-fr_XX,fr_XX-de_DE"
train_cmd() {
  case "$1" in
    m2m) echo fairseq-train "$WORK/bin" --task translation_multi_simple_epoch --arch transformer_wmt_en_de_big \
      --encoder-normalize-before --decoder-normalize-before --share-all-embeddings \
      --encoder-langtok src --decoder-langtok \
      --lang-pairs "$WORK/language_pairs.txt" --lang-dict "$WORK/lang_list.txt" --fixed-dictionary "$WORK/dict/dict.txt" \
      --max-update "$MAX_UPDATE_MULTI" --lr 5e-3 ;;
    mbart50) echo fairseq-train "$WORK/bin-mbart" --task translation_multi_simple_epoch --arch mbart_large \
      --encoder-normalize-before --decoder-normalize-before \
      --lang-tok-style mbart --encoder-langtok src --decoder-langtok \
      --langs en_XX,de_DE,fr_XX --lang-pairs "$MPAIRS" --max-update "$MAX_UPDATE_MULTI" --lr 5e-3 ;;
    bart) echo fairseq-train "$WORK/bin" --task translation --arch bart_base -s en -t de --max-update "$MAX_UPDATE_BART" --lr 2e-3 ;;
    mbart-ft) echo fairseq-train "$WORK/bin-mbart" --task translation_from_pretrained_bart --arch mbart_large \
      --encoder-normalize-before --decoder-normalize-before --langs en_XX,de_DE,fr_XX -s en_XX -t de_DE \
      --max-update "$MAX_UPDATE" --lr 5e-3 ;;
    *) echo "unknown model $1" >&2; return 1 ;;
  esac
}

if run train; then
  # PAR=2 trains two models at a time (each single-threaded).
  PAR=${PAR:-1}
  i=0
  for m in $MODELS; do
    rm -rf "$WORK/ckpt/$m"
    mkdir -p "$WORK/ckpt/$m"
    # shellcheck disable=SC2046
    ( echo "$(train_cmd "$m") ${train_common[*]} --save-dir $WORK/ckpt/$m" > "$WORK/ckpt/$m/argv.txt"
      start=$(date +%s)
      "${NICE_CMD[@]}" $(train_cmd "$m") "${train_common[@]}" --save-dir "$WORK/ckpt/$m" \
        > "$WORK/ckpt/$m/train.log" 2>&1
      echo "$(( $(date +%s) - start ))" > "$WORK/ckpt/$m/seconds"
      echo "== $m ($(cat "$WORK/ckpt/$m/seconds") s)"; grep -E "valid on|done training" "$WORK/ckpt/$m/train.log" | tail -n 3 ) &
    i=$((i + 1))
    [ $((i % PAR)) = 0 ] && wait
  done
  wait
fi

if run init; then
  for m in $MODELS; do
    rm -rf "$WORK/init/$m"
    mkdir -p "$WORK/init/$m"
    # shellcheck disable=SC2046
    "${NICE_CMD[@]}" python reference/multilingual_init.py "$WORK/init/$m/model_init.pt" \
      $(train_cmd "$m" | cut -d' ' -f2-) "${train_common[@]}" --save-dir "$WORK/init/$m" \
      > "$WORK/init/$m/init.log" 2>&1 || { tail -n 20 "$WORK/init/$m/init.log"; exit 1; }
  done
fi

if run ship; then
  for m in $MODELS; do
    M=$FIX/$m
    mkdir -p "$M"
    # checkpoint_last (the final update) without the optimizer state: still a plain fairseq checkpoint.
    python reference/multi30k/strip_checkpoint.py "$WORK/ckpt/$m/checkpoint_last.pt" "$M/model.pt"
    python reference/multi30k/strip_checkpoint.py "$WORK/init/$m/model_init.pt" "$M/model_init.pt"
    cp "$SPM" "$M/sentencepiece.bpe.model"
    case "$m" in
      m2m) cp "$WORK/dict/dict.txt" "$M/model_dict.txt"
           cp "$WORK/lang_list.txt" "$M/lang_list.txt"
           cp "$WORK/language_pairs.txt" "$M/language_pairs.txt" ;;
      mbart50) for l in en_XX de_DE fr_XX; do cp "$WORK/dict/dict.txt" "$M/dict.$l.txt"; done
           cp "$WORK/language_pairs.mbart.txt" "$M/language_pairs.txt" ;;
      bart) for l in en de; do cp "$WORK/dict/dict.txt" "$M/dict.$l.txt"; done ;;
      mbart-ft) for l in en_XX de_DE; do cp "$WORK/dict/dict.txt" "$M/dict.$l.txt"; done ;;
    esac
    cp "$WORK/ckpt/$m/train.log" "$WORK/train-$m.log"
    # manifest: training argv, wall seconds and the last validation line of this checkpoint
    python -I - "$FIX/manifest.json" "$m" "$WORK/ckpt/$m" <<'PYEOF'
import json, re, sys
path, m, ck = sys.argv[1:4]
try:
    man = json.load(open(path))
except FileNotFoundError:
    man = {}
valid = [l for l in open(f"{ck}/train.log") if "valid on 'valid' subset" in l]
man.setdefault("training", {})[m] = {
    "argv": open(f"{ck}/argv.txt").read().strip(),
    "wall_seconds": int(open(f"{ck}/seconds").read()),
    "last_valid": re.sub(r"^[0-9-]+ [0-9:]+ \| ", "", valid[-1].strip()) if valid else None,
}
json.dump(man, open(path, "w"), indent=1)
PYEOF
  done
fi

# Per-model fairseq task flags (everything the CLIs need besides the data dir and --path): the
# CLIs build the task from the command line, not from the checkpoint. Paths point into the model
# dir, so a run needs nothing but the model dir (and, for score-reference, the binarized data).
# task_flags MODEL SRC TGT
task_flags() {
  local M=$FIX/$1
  case "$1" in
    m2m) echo --task translation_multi_simple_epoch --lang-pairs "$M/language_pairs.txt" \
      --lang-dict "$M/lang_list.txt" --fixed-dictionary "$M/model_dict.txt" \
      --encoder-langtok src --decoder-langtok --source-lang "$2" --target-lang "$3" ;;
    mbart50) echo --task translation_multi_simple_epoch --lang-pairs "$M/language_pairs.txt" \
      --langs en_XX,de_DE,fr_XX --lang-tok-style mbart --encoder-langtok src --decoder-langtok \
      --source-lang "$2" --target-lang "$3" ;;
    bart) echo --task translation --source-lang "$2" --target-lang "$3" ;;
    mbart-ft) echo --task translation_from_pretrained_bart --langs en_XX,de_DE,fr_XX \
      --source-lang "$2" --target-lang "$3" ;;
  esac
}
# language code of a plain code in a model's language set
code() { case "$1" in mbart50|mbart-ft) xx "$2" ;; *) echo "$2" ;; esac; }
databin() { case "$1" in mbart50|mbart-ft) echo "$WORK/bin-mbart" ;; *) echo "$WORK/bin" ;; esac; }
# The directions of the interactive goldens per model (plain codes).
directions() {
  case "$1" in
    m2m) echo "en-de fr-en de-fr" ;;
    mbart50) echo "en-de fr-en" ;;
    *) echo "en-de" ;;
  esac
}

# fairseq's log lines go to stderr (fairseq/tasks/text_to_speech.py:23 calls logging.basicConfig()
# at import): a `record stdout` golden is stdout verbatim.
if run goldens; then
  start_manifest
  for m in $MODELS; do
    M=$FIX/$m G=$(goldens_dir "$FIX/$m")
    spm=(--bpe sentencepiece --sentencepiece-model "$M/sentencepiece.bpe.model")
    beam=(--beam 5 --nbest 2)
    for d in $(directions "$m"); do
      s=$(code "$m" "${d%-*}"); t=$(code "$m" "${d#*-}")
      # shellcheck disable=SC2046
      it=(fairseq-interactive "$M" --path "$M/model.pt" $(task_flags "$m" "$s" "$t") "${spm[@]}" --cpu)
      in=$FIX/input.${d%-*}
      note="interactive $s->$t, stdin = $in (raw text)"
      record stdout "$G/interactive_$s-${t}_beam5_nbest2.txt" "$in" "$note" "${it[@]}" "${beam[@]}" --buffer-size 1024 --batch-size 16
      if [ "$m" = m2m ] && [ "$d" = en-de ]; then
        record stdout "$G/interactive_$s-${t}_beam5_nbest2_bs1.txt" "$in" "$note; one sentence per batch" \
          "${it[@]}" "${beam[@]}" --buffer-size 1 --batch-size 1
      fi
      if [ "$d" = en-de ] && { [ "$m" = m2m ] || [ "$m" = mbart-ft ]; }; then
        # shellcheck disable=SC2046
        iti=(fairseq-interactive "$M" --path "$M/model_init.pt" $(task_flags "$m" "$s" "$t") "${spm[@]}" --cpu)
        record stdout "$G/interactive_init_$s-${t}_beam5_nbest2.txt" "$in" "$note; model_init.pt (random init, before any update)" \
          "${iti[@]}" "${beam[@]}" --buffer-size 1024 --batch-size 16
      fi
    done
    # score-reference on the binarized input.en / input.de pair (test split of the scratch data-bin)
    s=$(code "$m" en); t=$(code "$m" de)
    # shellcheck disable=SC2046
    record stdout "$G/score_reference_$s-$t.txt" - \
      "generate --score-reference on $(databin "$m") (test split = $FIX/input.en / input.de, sentencepiece + the model's dict; rebuilt by STAGE=prep)" \
      fairseq-generate "$(databin "$m")" --gen-subset test --path "$M/model.pt" $(task_flags "$m" "$s" "$t") \
      "${spm[@]}" --score-reference --cpu --batch-size 16
  done
  python -I reference/write_manifest.py "$MANIFEST_LINES" "$FIX/manifest.json" --fields argv,input,notes,exit_code --keep tensors,training \
    --made-by "bash reference/family_goldens.sh (fairseq 0.12.2, torch 2.13, CPU fp32, OMP_NUM_THREADS=1, cwd = repository root)" \
    --kinds '{"stdout": "stdout verbatim (fairseq'"'"'s log lines go to stderr and are dropped); W- lines hold wall-clock times"}'
fi

if run tensors; then
  for m in $MODELS; do
    M=$FIX/$m
    s=$(code "$m" en); t=$(code "$m" de)
    # translation_multi_simple_epoch: the checkpoint's cfg.task stores left_pad_source as the
    # bool True (MultilingualDatasetManager.prepare replaced the CLI string "True" in place), and
    # prepare runs utils.eval_bool on it again when the task is rebuilt from the checkpoint:
    # eval(True) raises TypeError, eval_bool returns its default False, i.e. a task built from the
    # checkpoint right-pads the source. The CLIs build the task from the command line (string
    # "True": left padding), so pass the string again, as the CLI would.
    case "$m" in
      m2m) ov=("lang_dict=$M/lang_list.txt" "fixed_dictionary=$M/model_dict.txt" "left_pad_source=True") ;;
      mbart50) ov=("left_pad_source=True") ;;
      *) ov=() ;;
    esac
    ov+=("sentencepiece_model=$M/sentencepiece.bpe.model")
    "${NICE_CMD[@]}" python reference/multilingual_tensors.py "$M" "$(databin "$m")" "$s" "$t" "$FIX/manifest.json" "${ov[@]}" 2>/dev/null
  done
fi
