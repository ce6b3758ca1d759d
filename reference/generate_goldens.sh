#!/usr/bin/env bash
# fairseq-generate 0.12.2 goldens for `tchseq generate` (tests/fixtures/generate/):
#   * bundled/: a data-bin for the bundled model (weights/multi30k.en-de), binarized by
#     fairseq-preprocess from tests/fixtures/bundled/score_reference/test.bpe.{en,de}: split
#     `test` (lines 1-40, mmap), `valid` (lines 41-100, mmap: the task shuffles every split but
#     test), `legacy` (lines 1-40, the TNTIDX format `lazy` and `cached` read) and `raw` (lines
#     1-40, raw text);
#   * models/NAME/: every small fixture's test split (tests/fixtures/models/inputs.*) with its
#     own dictionaries;
#   * runs.json and goldens/NAME.txt: each fairseq-generate command line and what it printed
#     (log lines dropped; with --results-path, the file it wrote).
# tchseq takes each command line unchanged (`tchseq generate` + the same arguments).
#   bash reference/generate_goldens.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh   # OMP_NUM_THREADS=1

OUT=tests/fixtures/generate
WORK=reference/work/generate
M=weights/multi30k.en-de
SR=tests/fixtures/bundled/score_reference
rm -rf "$OUT" "$WORK"
mkdir -p "$OUT/bundled" "$OUT/models" "$OUT/goldens" "$WORK/text"

for lang in en de; do
  sed -n 1,40p "$SR/test.bpe.$lang" > "$WORK/text/test.$lang"
  sed -n 41,100p "$SR/test.bpe.$lang" > "$WORK/text/valid.$lang"
done
preprocess() {  # DESTDIR IMPL [fairseq-preprocess options]
  local dest=$1 impl=$2
  shift 2
  fairseq-preprocess -s en -t de --srcdict "$M/dict.en.txt" --tgtdict "$M/dict.de.txt" \
    --dataset-impl "$impl" --destdir "$dest" --workers 1 "$@" > "$dest.log" 2>&1
  rm -f "$dest/preprocess.log"
}
preprocess "$WORK/mmap" mmap --testpref "$WORK/text/test" --validpref "$WORK/text/valid"
preprocess "$WORK/cached" cached --testpref "$WORK/text/test"
preprocess "$WORK/raw" raw --testpref "$WORK/text/test"
cp "$WORK"/mmap/dict.*.txt "$WORK"/mmap/test.* "$WORK"/mmap/valid.* "$OUT/bundled/"
for f in "$WORK"/cached/test.*; do cp "$f" "$OUT/bundled/legacy${f##*/test}"; done
for f in "$WORK"/raw/test.*; do cp "$f" "$OUT/bundled/raw${f##*/test}"; done

python3 - "$OUT" <<'PY'
import json, os, re, subprocess, sys
out = sys.argv[1]
m = json.load(open("tests/fixtures/models/manifest.json"))
testpref = m["inputs"]["src"][: -len(".src")]
for fx in m["fixtures"]:
    d, dest = fx["dir"], f"{out}/models/{fx['name']}"
    subprocess.run(["fairseq-preprocess", "-s", fx["source_lang"], "-t", fx["target_lang"],
                    "--srcdict", f"{d}/{fx['src_dict']}", "--tgtdict", f"{d}/{fx['tgt_dict']}",
                    "--testpref", testpref, "--destdir", dest, "--workers", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.remove(f"{dest}/preprocess.log")

B, M = f"{out}/bundled", "weights/multi30k.en-de"
base = [B, "--path", f"{M}/model.pt", "--cpu", "-s", "en", "-t", "de"]
runs = [
    ("default", base),
    ("batch7_nbest2_alignment", base + ["--batch-size", "7", "--nbest", "2", "--print-alignment"]),
    ("remove_bpe", base + ["--remove-bpe"]),
    ("moses_bpe_sacrebleu", base + ["--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", f"{M}/bpecodes",
                                    "--scoring", "sacrebleu"]),
    ("remove_bpe_sacrebleu_intl_lc", base + ["--remove-bpe", "--scoring", "sacrebleu", "--sacrebleu-tokenizer", "intl",
                                             "--sacrebleu-lowercase"]),
    ("remove_bpe_chrf", base + ["--remove-bpe", "--scoring", "chrf"]),
    ("remove_bpe_wer", base + ["--remove-bpe", "--scoring", "wer", "--wer-tokenizer", "13a", "--wer-lowercase"]),
    ("remove_bpe_wer_remove_punct", base + ["--remove-bpe", "--scoring", "wer", "--wer-tokenizer", "13a",
                                            "--wer-remove-punct", "--quiet"]),
    ("quiet", base + ["--quiet", "--max-tokens", "300"]),
    ("results_path", base + ["--results-path", "RESULTS", "--lenpen", "0.6", "--unkpen", "-0.5"]),
    ("valid_shuffled", base + ["--gen-subset", "valid", "--batch-size", "8", "--required-batch-size-multiple", "1"]),
    ("valid_seed5_maxtokens", base + ["--gen-subset", "valid", "--seed", "5", "--max-tokens", "400"]),
    ("lazy", base + ["--gen-subset", "legacy", "--dataset-impl", "lazy", "--batch-size", "16"]),
    ("cached", base + ["--gen-subset", "legacy", "--dataset-impl", "cached", "--batch-size", "16"]),
    ("legacy_inferred", base + ["--gen-subset", "legacy", "--batch-size", "16"]),
    ("raw", base + ["--gen-subset", "raw", "--dataset-impl", "raw", "--batch-size", "16"]),
    ("prefix2", base + ["--prefix-size", "2", "--batch-size", "16"]),
    ("sampling_topk10", base + ["--sampling", "--sampling-topk", "10", "--beam", "2", "--nbest", "2", "--seed", "3",
                                "--batch-size", "16"]),
    ("skip_invalid", base + ["--max-source-positions", "20", "--max-target-positions", "24",
                             "--skip-invalid-size-inputs-valid-test", "--batch-size", "16"]),
    ("distributed_rank1", base + ["--distributed-world-size", "3", "--distributed-rank", "1", "--batch-size", "4"]),
    ("ensemble_beam4", [B, "--path", f"{M}/model.pt:{M}/model.pt", "--cpu", "-s", "en", "-t", "de", "--beam", "4",
                        "--batch-size", "16"]),
    ("score_reference_batch16", base + ["--score-reference", "--batch-size", "16"]),
    ("score_reference_remove_bpe_chrf", base + ["--score-reference", "--remove-bpe", "--scoring", "chrf",
                                                "--max-tokens", "500"]),
    ("fairseq_noops", base + ["--bf16", "--task", "translation", "--dataset-impl", "mmap", "--num-workers", "0",
                              "--log-format", "simple", "--no-progress-bar", "--max-sentences", "16",
                              "--sacrebleu", "--eval-bleu"]),
]
for fx in m["fixtures"]:
    runs.append((f"models_{fx['name']}", [f"{out}/models/{fx['name']}", "--path", f"{fx['dir']}/model.pt", "--cpu",
                                         "-s", fx["source_lang"], "-t", fx["target_lang"], "--batch-size", "16"]))
log = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| ")
manifest = []
for name, argv in runs:
    results = None
    if "RESULTS" in argv:
        results = f"reference/work/generate/results_{name}"
        argv = [results if a == "RESULTS" else a for a in argv]
    p = subprocess.run(["fairseq-generate"] + argv, check=True, capture_output=True, text=True)
    text = open(f"{results}/generate-test.txt", encoding="utf-8").read() if results else p.stdout
    lines = [l for l in text.splitlines() if not log.match(l)]
    with open(f"{out}/goldens/{name}.txt", "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    manifest.append({"name": name, "argv": [("RESULTS" if a == results else a) for a in argv],
                     "results_path": results is not None})
    print(name, len(lines), "lines", file=sys.stderr)
with open(f"{out}/runs.json", "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
PY
