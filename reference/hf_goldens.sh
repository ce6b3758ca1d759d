#!/usr/bin/env bash
# Hugging Face and CTranslate2 conversions of fairseq fixtures, and the goldens that prove them
# (tests/fixtures/hf/, tests/fixtures/ct2/). Rerunnable; rebuilds everything from the committed
# fairseq fixtures. Needs the reference venv plus reference/requirements-hf.txt (transformers);
# not part of reference/make_all.sh (CI does not need transformers).
#
#   bash reference/hf_goldens.sh
#   STEPS=convert,check bash reference/hf_goldens.sh     # subset of: convert,check,random,tokenizers,bundled,ct2,plants,finish
#   HF_PYTHON=.venv-hf4/bin/python STEPS=tokenizers bash reference/hf_goldens.sh   # transformers 4 elsewhere
#
# convert  reference/hf_convert.py: m2m -> tests/fixtures/hf/m2m (M2M100ForConditionalGeneration),
#          postnorm -> tests/fixtures/hf/fsmt-postnorm (FSMTForConditionalGeneration)
# check    reference/hf_check.py: forward (fairseq vs transformers, float32 and float64),
#          tokenizer agreement, generate() vs fairseq's beam-search goldens
# random   reference/hf_random.py: tests/fixtures/hf/random-m2m100 (made by transformers) +
#          reference.safetensors, and fairseq's forward on its weights
#          reference/hf_random_nllb.py: tests/fixtures/hf/random-nllb, the same in NLLB-200's
#          convention (NllbTokenizer, language codes eng_Latn, ...)
# tokenizers reference/hf_tokenizers.py, once with transformers 4.57.6 (HF_PYTHON, default the
#          reference venv's python) and once with the newest 5.x (HF5_PYTHON, default
#          .venv-hf5/bin/python; reference/requirements-hf5.txt): tests/fixtures/hf/tokenizers/
#          transformers-<version>/, directories each release's tokenizer classes save (M2M-100
#          with its own languages pinned as added tokens, NLLB, FSMT) and the ids they give
# bundled  the bundled weights/multi30k.en-de as FSMT in reference/work/hf/fsmt-multi30k
#          (12 MB, not committed): conversion + forward + tokenizer check, recorded in the manifest
# ct2      reference/ct2_convert.sh: tests/fixtures/ct2/* and tests/fixtures/ct2/manifest.json
# plants   reference/hf_plants.py, reference/ct2_plants.py: which config fields change transformers'
#          and CTranslate2's output (tests/fixtures/hf/plants.json, tests/fixtures/ct2/plants.json)
# finish   versions, commands and file sizes into tests/fixtures/hf/manifest.json
set -euo pipefail
cd "$(dirname "$0")/.."
source reference/env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
STEPS="${STEPS:-convert,check,random,tokenizers,bundled,ct2,plants,finish}"
HF=tests/fixtures/hf
MANIFEST=$HF/manifest.json
LOG=reference/work/hf
mkdir -p "$HF" "$LOG"
has() { [[ ",$STEPS," == *",$1,"* ]]; }
run() { echo "+ $*" >&2; echo "$*" >> "$LOG/commands.txt"; "$@"; }

HF_PYTHON="${HF_PYTHON:-python}"
HF5_PYTHON="${HF5_PYTHON:-.venv-hf5/bin/python}"
# the versions requirements file $2 pins are the ones python $1 has
check_pins() {
  "$1" - "$2" <<'EOF'
import importlib.metadata as md, sys
want = {}
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if "==" in line:
        k, v = line.split("==")
        want[k] = v
for k, v in want.items():
    have = md.version(k)
    if have != v:
        raise SystemExit(f"{k} {have} installed, {sys.argv[1]} pins {v}")
EOF
}
check_pins "$HF_PYTHON" reference/requirements-hf.txt

if has convert; then
  : > "$LOG/commands.txt"
  rm -f "$MANIFEST"
  run python reference/hf_convert.py m2m tests/fixtures/multilingual/m2m $HF/m2m --manifest "$MANIFEST"
  run python reference/hf_convert.py fsmt tests/fixtures/models/postnorm $HF/fsmt-postnorm --manifest "$MANIFEST"
fi
if has check; then
  run python reference/hf_check.py m2m tests/fixtures/multilingual/m2m $HF/m2m "$MANIFEST"
  run python reference/hf_check.py fsmt tests/fixtures/models/postnorm $HF/fsmt-postnorm "$MANIFEST"
fi
if has random; then
  run python reference/hf_random.py $HF/random-m2m100 "$MANIFEST"
  run python reference/hf_random_nllb.py $HF/random-nllb "$MANIFEST"
fi
if has tokenizers; then
  check_pins "$HF5_PYTHON" reference/requirements-hf5.txt
  run "$HF_PYTHON" reference/hf_tokenizers.py $HF/tokenizers
  run "$HF5_PYTHON" reference/hf_tokenizers.py $HF/tokenizers
fi
if has bundled; then
  run python reference/hf_convert.py fsmt weights/multi30k.en-de $LOG/fsmt-multi30k --langs en de \
      --bpecodes weights/multi30k.en-de/bpecodes --manifest "$MANIFEST"
  run python reference/hf_check.py fsmt-bundled weights/multi30k.en-de $LOG/fsmt-multi30k "$MANIFEST"
fi
if has ct2; then
  run bash reference/ct2_convert.sh
fi
if has plants; then
  run "$HF_PYTHON" reference/hf_plants.py $HF/plants.json
  run python reference/ct2_plants.py tests/fixtures/ct2/plants.json
fi
if has finish; then
  python - "$MANIFEST" "$LOG/commands.txt" <<'EOF'
import hashlib, importlib.metadata as md, json, os, re, sys
path, cmds = sys.argv[1:3]
m = json.load(open(path))
ct2_path = "tests/fixtures/ct2/manifest.json"


def write_compact(obj, p):
    """indent=1 JSON with every list of numbers on one line"""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s*(-?[0-9][0-9.eE+-]*(?:,\s*-?[0-9][0-9.eE+-]*)*)\s*\]",
                  lambda mm: "[" + re.sub(r",\s*", ", ", mm.group(1)) + "]", text)
    with open(p, "w") as f:
        f.write(text + "\n")


if os.path.exists(ct2_path):  # final form before its hash is taken below
    write_compact(json.load(open(ct2_path)), ct2_path)
files = {}
for root in ("tests/fixtures/hf", "tests/fixtures/ct2"):
    for d, _, fs in sorted(os.walk(root)):
        for f in sorted(fs):
            p = os.path.join(d, f)
            if p == path:
                continue
            files[p] = {"bytes": os.path.getsize(p),
                        "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
head = {
    "made_by": "bash reference/hf_goldens.sh",
    "commands": [l.rstrip("\n") for l in open(cmds) if l.strip()],
    "versions": {p: md.version(p) for p in ("transformers", "tokenizers", "safetensors", "huggingface_hub",
                                              "torch", "fairseq", "ctranslate2", "sentencepiece", "sacremoses")},
    "environment": "reference/env.sh (1 thread, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1, sitecustomize fixes), "
                   "HF_HUB_OFFLINE=1, CPU, float32 unless stated",
    "committed": ["tests/fixtures/hf/m2m", "tests/fixtures/hf/fsmt-postnorm", "tests/fixtures/hf/random-m2m100",
                  "tests/fixtures/hf/random-nllb", "tests/fixtures/hf/tokenizers", "tests/fixtures/ct2/*"],
    "not_committed": {"fsmt-multi30k": "weights/multi30k.en-de as FSMT (model.safetensors 10.7 MB): made in "
                      "reference/work/hf/fsmt-multi30k by the `bundled` step; its numbers are under "
                      "conversions / checks"},
    "files": files,
    "total_bytes": {r: sum(v["bytes"] for k, v in files.items() if k.startswith(r))
                    for r in ("tests/fixtures/hf", "tests/fixtures/ct2")},
}
# CTranslate2 (tests/fixtures/ct2) vs transformers' forced_bos generate on the same m2m inputs
if os.path.exists(ct2_path) and "m2m" in m.get("checks", {}) and "generate" in m["checks"]["m2m"]:
    c2 = json.load(open(ct2_path))
    cmp = {}
    for q in ("float32", "int8"):
        key = f"m2m-{q}"
        if key not in c2.get("models", {}):
            continue
        for run, r in m["checks"]["m2m"]["generate"]["runs"].items():
            hf = r["forced_bos"]["hf_hypotheses_top1"]
            ct = [" ".join(x for x in h["tokens"][0].split() if not (x.startswith("__") and x.endswith("__")))
                  for h in c2["models"][key]["runs"][run]["hypotheses"]]
            cmp.setdefault(key, {})[run] = {"top1_equal": sum(a == b for a, b in zip(hf, ct)), "sentences": len(hf),
                                            "lines_differing": [i + 1 for i, (a, b) in enumerate(zip(hf, ct)) if a != b][:20]}
    m["checks"]["m2m"]["generate"]["ct2_top1_vs_hf_forced_bos_top1"] = cmp
order = ["made_by", "commands", "versions", "environment", "committed", "not_committed", "total_bytes",
         "conversions", "checks", "random_m2m100", "random_nllb", "files"]
out = {**{k: head[k] for k in head if k in order}, **{k: m[k] for k in m if k not in head}}
out = {k: out[k] for k in order if k in out} | {k: v for k, v in out.items() if k not in order}
write_compact(out, path)
print(json.dumps(out["total_bytes"]))
EOF
fi
du -sh "$HF" tests/fixtures/ct2 2>/dev/null || true
