#!/usr/bin/env python3
"""Which fields of a CTranslate2 directory (`config.json`, and the spec's flags in `model.bin`)
change what CTranslate2 computes: each candidate plant (one field of the faithful
`tests/fixtures/ct2/postnorm-float32` set to another value) is loaded by ctranslate2's own
Translator and run on the fixture's inputs; the golden records, per plant, the largest
difference of score_batch's per-token log-probs from the faithful directory (on the faithful
directory's own translations) and how many of translate_batch's best translations changed, or
the error CTranslate2 raises. A candidate that changes neither is no plant: the golden says so
and why. `tests/it/against.rs` plants exactly the fields proven here and expects `tchseq verify
--against` to fail naming each.

model.bin is read and written as ct2_storage.read_arrays documents it (binary version 6,
`ModelSpec._serialize`): a planted flag keeps its name and dtype, only its value changes.

Usage (repository root, `source reference/env.sh`):
  python reference/ct2_plants.py tests/fixtures/ct2/plants.json
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import ctranslate2
import numpy as np

from ct2_storage import DTYPES, read_arrays  # reference/

FIXTURE = "tests/fixtures/ct2/postnorm-float32"
INPUTS = "tests/fixtures/models/inputs.src"
OPTIONS = dict(beam_size=5, max_decoding_length=201, length_penalty=1.0, return_scores=True)

CONFIG = [
    ("add_source_bos", True),
    ("add_source_eos", False),
    ("bos_token", "<unk>"),
    ("eos_token", "<unk>"),
    ("unk_token", "</s>"),
    ("decoder_start_token", "<s>"),
    ("layer_norm_epsilon", 0.1),
    ("multi_query_attention", True),
]
# every scalar of TransformerSpec revision 7 that ct2-fairseq-converter writes
MODEL_BIN = [
    ("encoder/num_heads", 2),
    ("decoder/num_heads", 2),
    ("encoder/pre_norm", 1),
    ("decoder/pre_norm", 1),
    ("encoder/activation", 3),
    ("decoder/activation", 3),
    ("encoder/scale_embeddings", 1.0),
    ("decoder/scale_embeddings", 1.0),
    ("encoder/embeddings_merge", 1),
    ("encoder/multi_query_attention", 1),
    ("decoder/alignment_layer", 0),
    ("decoder/alignment_heads", 2),
    ("decoder/alibi", 1),
    ("decoder/alibi_use_positive_positions", 1),
    ("decoder/scale_alibi", 1),
    ("decoder/start_from_zero_embedding", 1),
]
WHY_INERT = {
    "bos_token": "read only with add_source_bos, which is false",
    "unk_token": "replaces out-of-vocabulary source tokens, which these inputs do not have",
    "decoder/alignment_layer": "chooses the attention returned with return_attention, not what is computed",
    "decoder/alignment_heads": "chooses the attention returned with return_attention, not what is computed",
    "encoder/embeddings_merge": "merges several source feature embeddings; a fairseq model has one",
    "decoder/alibi_use_positive_positions": "read only with decoder/alibi",
    "multi_query_attention": "measured: CTranslate2 4.8.5 computes the same with it set (the runtime reads the key/value heads of this spec from the model, not from config.json)",
    "encoder/multi_query_attention": "measured: CTranslate2 4.8.5 computes the same with it set for this spec",
    "decoder/scale_alibi": "read only with decoder/alibi",
}


def write_model_bin(path, version, spec, revision, arrays, aliases):
    def string(s):
        b = s.encode("utf-8") + b"\0"
        return struct.pack("<H", len(b)) + b

    out = [struct.pack("<I", version), string(spec), struct.pack("<I", revision), struct.pack("<I", len(arrays))]
    for name, a in arrays.items():
        out.append(string(name))
        out.append(struct.pack("<B", a.ndim) + b"".join(struct.pack("<I", d) for d in a.shape))
        data = np.ascontiguousarray(a).tobytes()
        out.append(struct.pack("<B", DTYPES.index(str(a.dtype))) + struct.pack("<I", len(data)) + data)
    out.append(struct.pack("<I", len(aliases)))
    for k, v in aliases.items():
        out.append(string(k) + string(v))
    with open(path, "wb") as f:
        f.write(b"".join(out))


def run(ct2_dir, sources, targets=None):
    tr = ctranslate2.Translator(ct2_dir, device="cpu", intra_threads=1, inter_threads=1)
    res = tr.translate_batch(sources, **OPTIONS)
    best = [r.hypotheses[0] for r in res]
    scored = tr.score_batch(sources, targets if targets is not None else best)
    return best, [s.log_probs for s in scored]


def measure(sources, base, file, field, value):
    base_best, base_lp = base
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "ct2")
        shutil.copytree(FIXTURE, d)
        if file == "config.json":
            with open(os.path.join(d, file), encoding="utf-8") as f:
                config = json.load(f)
            config[field] = value
            with open(os.path.join(d, file), "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2, sort_keys=True)
        else:
            version, spec, revision, arrays, aliases = read_arrays(os.path.join(d, file))
            arrays = dict(arrays)
            arrays[field] = np.array(value, dtype=arrays[field].dtype)
            write_model_bin(os.path.join(d, file), version, spec, revision, arrays, aliases)
        try:
            best, lp = run(d, sources, base_best)
        except Exception as e:  # what CTranslate2 raises is the outcome
            return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    diff = max((abs(a - b) for x, y in zip(lp, base_lp) for a, b in zip(x, y)), default=0.0)
    if any(len(x) != len(y) for x, y in zip(lp, base_lp)):
        diff = float("inf")
    return {"max_abs_log_prob_diff": diff if diff != float("inf") else "lengths differ",
            "translate_changed": sum(1 for a, b in zip(best, base_best) if a != b)}


def main(golden):
    with open(INPUTS, encoding="utf-8") as f:
        sources = [l.split() for l in f if l.strip()][:16]
    base = run(FIXTURE, sources)
    plants, inert = [], []
    for file, fields in (("config.json", CONFIG), ("model.bin", MODEL_BIN)):
        for field, value in fields:
            r = measure(sources, base, file, field, value)
            row = {"fixture": os.path.basename(FIXTURE), "file": file, "field": field, "value": value, **r}
            d = r.get("max_abs_log_prob_diff", 0.0)
            changes = "error" in r or d == "lengths differ" or d > 0.0 or r.get("translate_changed", 0) > 0
            if changes:
                plants.append(row)
            else:
                row["why"] = WHY_INERT.get(field, "(no reason recorded)")
                inert.append(row)
            print(f"{file} {field}={json.dumps(value)}: {'PLANT' if changes else 'inert'} {r}", file=sys.stderr)
    doc = {
        "made_by": "python reference/ct2_plants.py " + golden,
        "versions": {"ctranslate2": ctranslate2.__version__},
        "how": f"each plant: {FIXTURE} copied, one field set to `value` (a model.bin flag keeps its dtype), "
               f"ctranslate2.Translator(cpu, 1 thread) translate_batch({OPTIONS}) on the first 16 lines of {INPUTS}, "
               "score_batch on the faithful directory's own best translations; max_abs_log_prob_diff and "
               "translate_changed against the faithful directory, or the error CTranslate2 raises",
        "plants": plants,
        "not_plants": inert,
    }
    with open(golden, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{len(plants)} plants, {len(inert)} inert candidates -> {golden}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
