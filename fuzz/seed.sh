#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from the checkpoint fixtures (and the pickles inside the zips).
set -euo pipefail
FUZZ="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$FUZZ")"
mkdir -p "$FUZZ"/corpus/{pickle,container,torch_zip,legacy,safetensors,dictionary,bpe_codes,sentencepiece_model,csv_rows,data_bin}
# data_bin: the minimized seeds (made by reference/data_bin_fixtures.sh from its fixtures)
cp "$FUZZ"/corpus-min/data_bin/* "$FUZZ"/corpus/data_bin/
i=0
for f in "$ROOT"/tests/fixtures/models/*/model.pt "$ROOT"/tests/fixtures/models/*/weights.pt \
         "$ROOT"/tests/fixtures/wild/*/checkpoint*.pt "$ROOT"/tests/fixtures/wild/*/checkpoints/*.pt; do
    [ -f "$f" ] || continue
    i=$((i + 1))
    cp "$f" "$FUZZ/corpus/container/seed$i"
    if head -c 4 "$f" | grep -q "PK"; then
        cp "$f" "$FUZZ/corpus/torch_zip/seed$i"
        # data.pkl of the zip for the pickle target
        python3 - "$f" "$FUZZ/corpus/pickle/seed$i" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith("data.pkl"))
open(sys.argv[2], "wb").write(z.read(name))
PY
    else
        cp "$f" "$FUZZ/corpus/legacy/seed$i"
    fi
done
# A small safetensors file.
python3 - "$FUZZ/corpus/safetensors/seed0" <<'PY'
import json, struct, sys
h = json.dumps({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(16))
PY
# The text readers: the bundled model's dictionaries and BPE codes, the BPE and sentencepiece
# fixtures.
cp "$ROOT"/weights/multi30k.en-de/dict.*.txt "$FUZZ/corpus/dictionary/"
cp "$ROOT"/tests/fixtures/text/bpecodes* "$FUZZ/corpus/bpe_codes/"
cp "$ROOT/weights/multi30k.en-de/bpecodes" "$FUZZ/corpus/bpe_codes/bundled"
cp "$ROOT"/tests/fixtures/text/spm/*.model "$FUZZ/corpus/sentencepiece_model/"
# score's tables: the first byte picks CSV (even) or TSV (odd); quoting, CRLF, ragged and
# empty fields, a BOM, extra columns.
python3 - "$FUZZ/corpus/csv_rows" <<'PY'
import os, sys
d = sys.argv[1]
seeds = {
    "plain": b",source,target\nA dog runs.,Ein Hund rennt.\nTwo cats.,Zwei Katzen.\n",
    "quoted": b',id,source,target\r\n1,"A man, tall.","Ein Mann, gro\xc3\x9f."\r\n2,"He said ""hi""",Er sagte hallo\r\n',
    "ragged": b",source,target\na,b,c\nonly\n,\n\n\"open,x\n",
    "tsv": b"\x01source\ttarget\tnote\nA dog.\tEin Hund.\tx\n\t\t\nbad\xff\tok\tz\n",
    "bom": b",\xef\xbb\xbfsource,target,logprob\nx,y,1\n",
}
for name, data in seeds.items():
    open(os.path.join(d, name), "wb").write(data)
PY
echo "seeded $i checkpoints and the text readers' files into $FUZZ/corpus"
