#!/usr/bin/env bash
# CTranslate2 conversions of fairseq fixtures, made by ctranslate2's own ct2-fairseq-converter
# (ctranslate2 4.8.5 from the reference venv), and CTranslate2's own translations of the fixture
# inputs for later comparison (tests/fixtures/ct2/manifest.json).
#
#   bash reference/ct2_convert.sh                 # all models
#   MODELS="m2m postnorm" bash reference/ct2_convert.sh
#
# Writes tests/fixtures/ct2/<name>-float32/ and tests/fixtures/ct2/<name>-int8/
# (`--quantization int8`): model.bin, config.json and the vocabulary file(s) the converter writes
# (shared_vocabulary.json, or source_vocabulary.json + target_vocabulary.json) — nothing else.
# Then reference/ct2_check.py translates with ctranslate2.Translator (beam 5, compute_type
# float32 resp. int8, one thread) and records the outputs and their agreement with fairseq's
# goldens. The converter imports fairseq, so this runs inside reference/env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source reference/env.sh
OUT=tests/fixtures/ct2
MANIFEST=$OUT/manifest.json
MODELS="${MODELS:-m2m postnorm postnorm-untied-2018 untied}"
mkdir -p "$OUT"

# CTranslate2's own float16 and int16 storage: postnorm-untied-2018 with --quantization int16 and
# float16, and the decoder-only spec of a fairseq language model (lm-gpt, float16). The
# converter's `_load` sets attributes on `checkpoint["args"] or checkpoint["cfg"]["model"]`, which
# fails on the plain dict a cfg-only checkpoint holds, so lm-gpt is converted from a copy whose
# `args` is that dict as an argparse Namespace (reference/work/ct2/lm-gpt-args). Goldens of what
# each model.bin stores: tests/fixtures/ct2/storage.json (reference/ct2_storage.py).
storage() {
  mkdir -p reference/work/ct2
  local lm=tests/fixtures/lm/lm-gpt args=reference/work/ct2/lm-gpt-args specs=()
  mkdir -p "$args"
  cp "$lm/dict.txt" "$args/"
  python - "$lm/model.pt" "$args/model.pt" <<'PY'
import argparse, sys, torch
c = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
model = dict(c["cfg"]["model"])
model["arch"] = model.pop("_name")
task = {k: v for k, v in dict(c["cfg"].get("task") or {}).items() if k != "_name"}
c["args"] = argparse.Namespace(**{**task, "task": "language_modeling", **model})
c["cfg"] = None
torch.save(c, sys.argv[2])
PY
  local jobs=(
    "postnorm-untied-2018-int16|tests/fixtures/models/postnorm-untied-2018|int16|--source_lang src --target_lang tgt"
    "postnorm-untied-2018-float16|tests/fixtures/models/postnorm-untied-2018|float16|--source_lang src --target_lang tgt"
    "lm-gpt-float16|$args|float16|"
  )
  local job name dir q extra
  for job in "${jobs[@]}"; do
    IFS='|' read -r name dir q extra <<< "$job"
    local dst="$OUT/$name"
    rm -rf "$dst"
    # shellcheck disable=SC2206
    local argv=(ct2-fairseq-converter --model_path "$dir/model.pt" --data_dir "$dir" $extra
                --unsafe_deserialization --output_dir "$dst" --quantization "$q")
    echo "+ ${argv[*]}" >&2
    "${argv[@]}" > "reference/work/ct2/$name.log" 2>&1 || { cat "reference/work/ct2/$name.log" >&2; exit 1; }
    for f in "$dst"/*; do
      case "$(basename "$f")" in
        model.bin|config.json|*vocabulary.json|*vocabulary.txt) ;;
        *) rm -rf "$f" ;;
      esac
    done
    specs+=("$name=$dst:$(python -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${argv[@]}")")
  done
  python reference/ct2_storage.py "$OUT/storage.json" "${specs[@]}"
}
if [ "${1:-}" = storage ]; then
  storage
  du -sh "$OUT"/*16
  exit 0
fi

convert() { # name kind q fairseq_dir extra-args...
  local name=$1 kind=$2 q=$3 dir=$4; shift 4
  local dst="$OUT/$name-$q"
  local qarg=()
  [ "$q" = int8 ] && qarg=(--quantization int8)
  rm -rf "$dst"
  local argv=(ct2-fairseq-converter --model_path "$dir/model.pt" --data_dir "$dir" "$@"
              --unsafe_deserialization --output_dir "$dst" "${qarg[@]}")
  echo "+ ${argv[*]}" >&2
  "${argv[@]}" > "reference/work/ct2/$name-$q.log" 2>&1 || { cat "reference/work/ct2/$name-$q.log" >&2; exit 1; }
  # keep what a reader needs
  for f in "$dst"/*; do
    case "$(basename "$f")" in
      model.bin|config.json|*vocabulary.json|*vocabulary.txt) ;;
      *) rm -rf "$f" ;;
    esac
  done
  python - "$MANIFEST" "$name-$q" "${argv[@]}" <<'EOF'
import json, sys
path, key, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    m = json.load(open(path))
except FileNotFoundError:
    m = {}
m.setdefault("conversions", {})[key] = argv
json.dump(m, open(path, "w"), indent=1, ensure_ascii=False)
EOF
  python reference/ct2_check.py "$MANIFEST" "$name-$q" "$kind" "$dst" "$q" "$dir"
}

mkdir -p reference/work/ct2
for model in $MODELS; do
  for q in float32 int8; do
    case $model in
      m2m)
        d=tests/fixtures/multilingual/m2m
        convert m2m m2m $q $d --fixed_dictionary $d/model_dict.txt --source_lang en --target_lang de ;;
      postnorm|postnorm-untied-2018|untied)
        convert $model plain $q tests/fixtures/models/$model --source_lang src --target_lang tgt ;;
      *) echo "unknown model $model" >&2; exit 2 ;;
    esac
  done
done

python - "$MANIFEST" <<'EOF'
import json, sys, importlib.metadata as md
path = sys.argv[1]
m = json.load(open(path))
m["made_by"] = "bash reference/ct2_convert.sh (ct2-fairseq-converter, then reference/ct2_check.py)"
m["versions"] = {p: md.version(p) for p in ("ctranslate2", "fairseq", "torch")}
m["not_convertible"] = {
    "prenorm": "ct2-fairseq-converter: 'Options --encoder-attention-heads and --decoder-attention-heads "
               "must have the same value' (4 vs 2)",
}
m = {k: m[k] for k in ["made_by", "versions", "conversions", "not_convertible", "models"] if k in m}
json.dump(m, open(path, "w"), indent=1, ensure_ascii=False)
open(path, "a").write("\n")
EOF
du -sh "$OUT"
