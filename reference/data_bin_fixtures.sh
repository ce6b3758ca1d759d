#!/usr/bin/env bash
# tests/fixtures/data_bin/: a tiny data-bin made by fairseq-preprocess 0.12.2 for every
# --dataset-impl (mmap, lazy, cached, raw), with a shard `test1` beside `test`, and golden.json:
# the token ids fairseq's own readers give back for every sentence of every format. Also seeds
# fuzz/corpus-min/data_bin/ with the binary pairs (fuzz/fuzz_targets/data_bin.rs's framing).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
OUT=tests/fixtures/data_bin
WORK=reference/work/data_bin
rm -rf "$OUT" "$WORK"
mkdir -p "$OUT" "$WORK/text"

# German -> English; "Zebra" and "zebra" are unknown to the dictionaries (<unk>).
cat > "$WORK/text/train.de" <<'T'
ein Hund rennt durch das Gras .
zwei Hunde spielen im Schnee .
ein kleines Mädchen isst Eis .
ein Mann fährt auf einem Fahrrad .
T
cat > "$WORK/text/train.en" <<'T'
a dog runs through the grass .
two dogs play in the snow .
a little girl eats ice cream .
a man rides a bicycle .
T
cat > "$WORK/text/test.de" <<'T'
ein Hund spielt im Gras .
zwei Mädchen  essen Eis .
ein Zebra rennt .
T
cat > "$WORK/text/test.en" <<'T'
a dog plays in the grass .
two girls eat ice cream .
a zebra runs .
T
cat > "$WORK/text/test1.de" <<'T'
ein Mann spielt .
Schnee
T
cat > "$WORK/text/test1.en" <<'T'
a man plays .
snow
T

fairseq-preprocess -s de -t en --trainpref "$WORK/text/train" --dict-only \
    --destdir "$WORK/dict" --workers 1 > "$WORK/dict.log" 2>&1
for impl in mmap lazy cached raw; do
    fairseq-preprocess -s de -t en --srcdict "$WORK/dict/dict.de.txt" --tgtdict "$WORK/dict/dict.en.txt" \
        --testpref "$WORK/text/test,$WORK/text/test1" --dataset-impl "$impl" \
        --destdir "$OUT/$impl" --workers 1 > "$WORK/$impl.log" 2>&1
    rm -f "$OUT/$impl/preprocess.log"
done

# The goldens, read back by fairseq: every format through the translation task's
# load_langpair_dataset (combine=True: test then test1 in a ConcatDataset; --dataset-impl given,
# and for the binary formats also inferred), and the mmap shards through MMapIndexedDataset.
python3 - "$OUT" <<'PY'
import json, os, sys
from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import MMapIndexedDataset, infer_dataset_impl
from fairseq.tasks.translation import load_langpair_dataset
out = sys.argv[1]
golden = {"split": "test", "source_lang": "de", "target_lang": "en", "formats": {}}
def pair(d, impl):
    src_dict = Dictionary.load(os.path.join(d, "dict.de.txt"))
    tgt_dict = Dictionary.load(os.path.join(d, "dict.en.txt"))
    ds = load_langpair_dataset(d, "test", "de", src_dict, "en", tgt_dict, combine=True,
        dataset_impl=impl, upsample_primary=1, left_pad_source=True, left_pad_target=False,
        max_source_positions=1024, max_target_positions=1024)
    if ds.supports_prefetch:  # cached: what fairseq's iterator does before reading
        ds.prefetch(list(range(len(ds))))
    return ([ds.src[i].tolist() for i in range(len(ds.src))],
            [ds.tgt[i].tolist() for i in range(len(ds.tgt))], len(src_dict), len(tgt_dict))
for impl in ["mmap", "lazy", "cached", "raw"]:
    d = os.path.join(out, impl)
    src, tgt, ns, nt = pair(d, impl)
    fmt = {"src": src, "tgt": tgt, "src_sizes": [len(x) for x in src],
           "tgt_sizes": [len(x) for x in tgt], "src_dict_len": ns, "tgt_dict_len": nt,
           "inferred_impl": infer_dataset_impl(os.path.join(d, "test.de-en.de"))}
    if impl != "raw":
        assert pair(d, None)[:2] == (src, tgt), impl
    if impl == "mmap":
        for lang, ids in [("de", src), ("en", tgt)]:
            direct = []
            for shard in ["test", "test1"]:
                m = MMapIndexedDataset(os.path.join(d, f"{shard}.de-en.{lang}"))
                direct += [m[i].tolist() for i in range(len(m))]
                fmt["dtype"] = m._index.dtype.__name__
            assert direct == ids, (direct, ids)
    golden["formats"][impl] = fmt
with open(os.path.join(out, "golden.json"), "w") as f:
    json.dump(golden, f)
    f.write("\n")
PY

# Fuzz seeds: [u32 LE length of the .idx][.idx][.bin] for every binary dataset written.
mkdir -p fuzz/corpus-min/data_bin
python3 - "$OUT" fuzz/corpus-min/data_bin <<'PY'
import glob, os, struct, sys
out, dest = sys.argv[1:]
for idx in sorted(glob.glob(os.path.join(out, "*", "*.idx"))):
    impl = os.path.basename(os.path.dirname(idx))
    data = open(idx, "rb").read()
    bin_ = open(idx[:-4] + ".bin", "rb").read()
    name = f"{impl}-{os.path.basename(idx)[:-4]}"
    open(os.path.join(dest, name), "wb").write(struct.pack("<I", len(data)) + data + bin_)
PY
du -sh "$OUT"
echo "wrote $OUT and fuzz/corpus-min/data_bin"
