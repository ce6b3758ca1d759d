#!/usr/bin/env bash
# fairseq-generate 0.12.2 goldens for `tchseq generate` (tests/fixtures/generate/):
#   * bundled/: a data-bin for the bundled model (weights/multi30k.en-de), binarized by
#     fairseq-preprocess from tests/fixtures/bundled/score_reference/test.bpe.{en,de}: split
#     `test` (lines 1-40, mmap), `valid` (lines 41-100, mmap: the task shuffles every split but
#     test), `legacy` (lines 1-40, the TNTIDX format `lazy` and `cached` read) and `raw` (lines
#     1-40, raw text);
#   * models/NAME/: every small fixture's test split (tests/fixtures/models/inputs.*) with its
#     own dictionaries;
#   * multilingual/: data-bins for the multilingual and BART-family fixtures (below);
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
# rawunk: the raw split with a made-up word (not in the dictionary) in every third source line,
# for --replace-unk, which prints the raw lines and takes the source words from them; and an
# alignment dictionary for two of the words
python3 - "$OUT/bundled" <<'PY'
import sys
d = sys.argv[1]
made_up = ["Kraxelhuber", "Zwieselbrot", "Quorbex", "Flimsdorf", "Yaxley", "Brumhilde"]
lines = open(f"{d}/raw.en-de.en", encoding="utf-8").read().splitlines()
for i, line in enumerate(lines):
    words = line.split(" ")
    if i % 3 == 0 and len(words) > 3:
        words[1] = made_up[i % len(made_up)]
    lines[i] = " ".join(words)
open(f"{d}/rawunk.en-de.en", "w", encoding="utf-8").write("".join(l + "\n" for l in lines))
open(f"{d}/unk-align.txt", "w", encoding="utf-8").write("Kraxelhuber Kraxelhuber\nQuorbex Quorbex\n")
PY
cp "$OUT/bundled/raw.en-de.de" "$OUT/bundled/rawunk.en-de.de"

# multilingual/: the multilingual fixtures' inputs (tests/fixtures/multilingual/input.*) as
# sentencepiece pieces, binarized with the fixtures' joined dictionary: m2m/ (en-de, the language
# codes of M2M-100 and BART: `test` lines 1-60, `valid` lines 31-60) and mbart/ (en_XX-de_DE).
ML=tests/fixtures/multilingual
mkdir -p "$WORK/spm" "$OUT/multilingual"
for lang in en de; do
  python3 -c 'import sys, sentencepiece as s; m = s.SentencePieceProcessor(model_file=sys.argv[1])
for l in open(sys.argv[2], encoding="utf-8"): print(" ".join(m.encode(l.rstrip("\n"), out_type=str)))' \
    "$ML/m2m/sentencepiece.bpe.model" "$ML/input.$lang" > "$WORK/spm/test.$lang"
  sed -n 31,60p "$WORK/spm/test.$lang" > "$WORK/spm/valid.$lang"
  cp "$WORK/spm/test.$lang" "$WORK/spm/test.$([ $lang = en ] && echo en_XX || echo de_DE)"
done
fairseq-preprocess -s en -t de --srcdict "$ML/m2m/model_dict.txt" --tgtdict "$ML/m2m/model_dict.txt" \
  --testpref "$WORK/spm/test" --validpref "$WORK/spm/valid" --destdir "$OUT/multilingual/m2m" --workers 1 > /dev/null 2>&1
fairseq-preprocess -s en_XX -t de_DE --srcdict "$ML/mbart50/dict.en_XX.txt" --tgtdict "$ML/mbart50/dict.de_DE.txt" \
  --testpref "$WORK/spm/test" --destdir "$OUT/multilingual/mbart" --workers 1 > /dev/null 2>&1
rm -f "$OUT"/multilingual/*/preprocess.log

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
    ("batch16_soft_alignment", base + ["--batch-size", "16", "--print-alignment", "soft"]),
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
    ("replace_unk_raw", base + ["--gen-subset", "rawunk", "--dataset-impl", "raw", "--replace-unk", f"{B}/unk-align.txt",
                                "--batch-size", "16"]),
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
ML, MD = "tests/fixtures/multilingual", f"{out}/multilingual"
spm = ["--bpe", "sentencepiece", "--sentencepiece-model", f"{ML}/m2m/sentencepiece.bpe.model"]
m2m = [f"{MD}/m2m", "--path", f"{ML}/m2m/model.pt", "--task", "translation_multi_simple_epoch",
       "--lang-pairs", f"{ML}/m2m/language_pairs.txt", "--lang-dict", f"{ML}/m2m/lang_list.txt",
       "--fixed-dictionary", f"{ML}/m2m/model_dict.txt", "--encoder-langtok", "src", "--decoder-langtok", "--cpu"]
mbart50 = [f"{MD}/mbart", "--path", f"{ML}/mbart50/model.pt", "--task", "translation_multi_simple_epoch",
           "--lang-pairs", f"{ML}/mbart50/language_pairs.txt", "--langs", "en_XX,de_DE,fr_XX", "--lang-tok-style", "mbart",
           "--encoder-langtok", "src", "--decoder-langtok", "--cpu", "-s", "en_XX", "-t", "de_DE"]
mbart_ft = [f"{MD}/mbart", "--path", f"{ML}/mbart-ft/model.pt", "--task", "translation_from_pretrained_bart",
            "--langs", "en_XX,de_DE,fr_XX", "--cpu", "-s", "en_XX", "-t", "de_DE"]
runs += [
    # the same search as the next run, in subwords: its near-ties are the next run's
    ("m2m_alignment", m2m + ["-s", "en", "-t", "de", "--print-alignment", "--batch-size", "16"]),
    ("m2m_en-de_sacrebleu", m2m + ["-s", "en", "-t", "de", "--batch-size", "16", "--remove-bpe", "sentencepiece",
                                   "--scoring", "sacrebleu"] + spm),
    ("m2m_de-en_nbest2_maxtokens", m2m + ["-s", "de", "-t", "en", "--nbest", "2", "--max-tokens", "300"]),
    ("m2m_valid_prefix2", m2m + ["-s", "en", "-t", "de", "--gen-subset", "valid", "--prefix-size", "2", "--batch-size", "8"]),
    ("m2m_score_reference", m2m + ["-s", "en", "-t", "de", "--score-reference", "--batch-size", "16"]),
    ("mbart50_en_XX-de_DE", mbart50 + ["--batch-size", "16", "--scoring", "chrf"]),
    ("mbart-ft_en_XX-de_DE", mbart_ft + ["--batch-size", "16", "--print-alignment"]),
    ("mbart-ft_score_reference", mbart_ft + ["--score-reference", "--max-tokens", "400"]),
    ("bart_en-de", [f"{MD}/m2m", "--path", f"{ML}/bart/model.pt", "--task", "translation", "--cpu", "-s", "en", "-t", "de",
                    "--batch-size", "16"]),
]
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
