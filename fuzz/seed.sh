#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from the checkpoint fixtures (and the pickles inside the zips).
set -euo pipefail
FUZZ="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$FUZZ")"
mkdir -p "$FUZZ"/corpus/{pickle,container,torch_zip,legacy,safetensors}
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
echo "seeded $i checkpoints into $FUZZ/corpus"
