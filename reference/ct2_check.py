#!/usr/bin/env python3
"""CTranslate2's own outputs for the converted fixtures (tests/fixtures/ct2/*), for later
comparison with tchseq's CTranslate2 reader, and how they compare with fairseq.

Usage (repository root, `source reference/env.sh`; run by reference/ct2_convert.sh):
  python reference/ct2_check.py MANIFEST NAME KIND CT2_DIR COMPUTE_TYPE FAIRSEQ_DIR

KIND m2m:   the golden directions of tests/fixtures/multilingual/m2m (en-de, fr-en, de-fr):
            source = [__src__] + sentencepiece pieces (ct2 appends </s>: add_source_eos),
            target_prefix = [__tgt__].
KIND plain: tests/fixtures/models/inputs.src, source = the whitespace symbols.
translate_batch(beam_size=5, num_hypotheses=nbest of the golden, max_decoding_length=201,
length_penalty=1, return_scores=True, max_batch_size=16), one intra thread. score_batch on the
fixture's teacher-forced batch gives ct2's per-token log-probs, compared with fairseq's.
"""
import json
import os
import sys

import ctranslate2
import torch

from hf_fairseq import Fixture, read_interactive  # reference/


DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")  # include/ctranslate2/types.h order


def read_model_bin(path):
    """Index of a CTranslate2 model.bin (binary version 6, ctranslate2/specs/model_spec.py
    _serialize, little-endian): u32 version; string spec name; u32 revision; u32 n; n x (string
    name, u8 rank, rank x u32 dim, u8 dtype id, u32 nbytes, data); u32 n_aliases; n x (string
    alias, string target). string = u16 length incl. NUL, bytes, NUL. Scalars (e.g.
    `*/scale_embeddings`, flags) are rank-0 variables; small ones are returned with their value."""
    import struct

    import numpy as np

    with open(path, "rb") as f:
        data = f.read()
    off = 0

    def u(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = u("H")
        s = data[off:off + n - 1].decode("utf-8")
        off += n
        return s

    version = u("I")
    name = string()
    revision = u("I")
    variables = []
    for _ in range(u("I")):
        vname = string()
        rank = u("B")
        shape = [u("I") for _ in range(rank)]
        dtype = DTYPES[u("B")]
        nbytes = u("I")
        entry = {"name": vname, "shape": shape, "dtype": dtype, "bytes": nbytes}
        if rank == 0 or (rank == 1 and shape[0] == 1):
            entry["value"] = np.frombuffer(data[off:off + nbytes], dtype=dtype).tolist()
        off += nbytes
        variables.append(entry)
    aliases = [[string(), string()] for _ in range(u("I"))]
    assert off == len(data), (off, len(data))
    return {"binary_version": version, "spec": name, "revision": revision,
            "variables": variables, "aliases": aliases}


def main():
    manifest, name, kind, ct2_dir, compute_type, fairseq_dir = sys.argv[1:7]
    tr = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, intra_threads=1, inter_threads=1)
    if kind == "m2m":
        fx = Fixture("m2m", fairseq_dir, "en", "de")
        base = "tests/fixtures/multilingual"
        runs = [("en", "de", f"{base}/input.en", f"{fairseq_dir}/goldens/interactive_en-de_beam5_nbest2.txt", 2),
                ("fr", "en", f"{base}/input.fr", f"{fairseq_dir}/goldens/interactive_fr-en_beam5_nbest2.txt", 2),
                ("de", "fr", f"{base}/input.de", f"{fairseq_dir}/goldens/interactive_de-fr_beam5_nbest2.txt", 2)]
    else:
        fx = Fixture("plain", fairseq_dir, "src", "tgt")
        base = "tests/fixtures/models"
        runs = [("src", "tgt", f"{base}/inputs.src", f"{fairseq_dir}/interactive/beam5.txt", 1)]
    opts = dict(beam_size=5, length_penalty=1.0, max_decoding_length=201, return_scores=True, max_batch_size=16)
    sec = {"ct2_dir": ct2_dir, "compute_type": compute_type, "fairseq_dir": fairseq_dir,
           "argv": ["python", "reference/ct2_check.py"] + sys.argv[1:],
           "translate_batch_options": opts, "runs": {}}
    for s, t, inp, golden, nbest in runs:
        lines = [l.rstrip("\n") for l in open(inp, encoding="utf-8")]
        if kind == "m2m":
            src = [[f"__{s}__"] + fx.pieces(l).split() for l in lines]
            prefix = [[f"__{t}__"]] * len(lines)
        else:
            src = [l.split() for l in lines]
            prefix = None
        res = tr.translate_batch(src, target_prefix=prefix, num_hypotheses=nbest, **opts)
        gold = read_interactive(golden)
        top1 = lists = 0
        hyps = []
        for i, r in enumerate(res):
            toks = [h if kind != "m2m" else [x for x in h if x != f"__{t}__"] for h in r.hypotheses]
            ours = [" ".join(h) for h in toks]
            theirs = [h[1] for h in gold[i]["H"]]
            top1 += ours[0] == theirs[0]
            lists += ours == theirs
            hyps.append({"tokens": [" ".join(h) for h in r.hypotheses], "scores": [round(x, 6) for x in r.scores]})
        sec["runs"][f"{s}-{t}"] = {
            "input": inp, "golden": golden, "sentences": len(lines), "num_hypotheses": nbest,
            "source_tokens": "[__src__] + pieces" if kind == "m2m" else "whitespace symbols",
            "target_prefix": f"[__{t}__]" if kind == "m2m" else None,
            "top1_equal_fairseq": top1, f"nbest{nbest}_lists_equal_fairseq": lists,
            "hypotheses": hyps,
        }
        print(f"[ct2 {name} {s}-{t}] top1 {top1}/{len(lines)} nbest{nbest} {lists}/{len(lines)}", flush=True)

    # teacher-forced: ct2 score_batch vs fairseq's log-probs of the same target tokens
    if kind == "m2m":
        en = [l.rstrip("\n") for l in open(f"{base}/input.en", encoding="utf-8")]
        de = [l.rstrip("\n") for l in open(f"{base}/input.de", encoding="utf-8")]
        ids = [2, 6, 0, 4, 1, 5]
        src_l, tgt_l = [en[i] for i in ids], [de[i] for i in ids]
        src = [["__en__"] + fx.pieces(l).split() for l in src_l]
        tgt = [["__de__"] + fx.pieces(l).split() for l in tgt_l]
    else:
        s_all = [l.rstrip("\n") for l in open(f"{base}/inputs.src", encoding="utf-8")]
        t_all = [l.rstrip("\n") for l in open(f"{base}/inputs.tgt", encoding="utf-8")]
        ids = [2, 7, 0, 11, 4, 62, 70]
        src_l, tgt_l = [s_all[i] for i in ids], [t_all[i] for i in ids]
        src = [l.split() for l in src_l]
        tgt = [l.split() for l in tgt_l]
    sc = tr.score_batch(src, tgt)
    b = fx.batch(src_l, tgt_l)
    ref = fx.forward(b)
    worst = 0.0
    for r, res in enumerate(sc):
        tgt_ids = b["target"][r]
        n = int(tgt_ids.ne(fx.td.pad()).sum())
        fs = ref["lprobs"][r, :n].gather(-1, tgt_ids[:n].unsqueeze(-1)).squeeze(-1)
        ct = torch.tensor(res.log_probs)
        if len(ct) != n:
            raise SystemExit(f"score_batch gave {len(ct)} values for {n} target tokens")
        worst = max(worst, float((fs - ct).abs().max()))
    sec["score_batch_vs_fairseq"] = {
        "rows": ids, "max_abs_token_logprob_diff": worst,
        "note": "ct2 score_batch log-probs (one per target token incl. </s>) vs fairseq lprobs gathered at the target",
    }
    print(f"[ct2 {name} score_batch] max |logprob diff| vs fairseq {worst:.3e}", flush=True)
    files = {f: os.path.getsize(os.path.join(ct2_dir, f)) for f in sorted(os.listdir(ct2_dir))}
    sec["files"] = files
    sec["model_bin"] = read_model_bin(os.path.join(ct2_dir, "model.bin"))
    sec["config"] = json.load(open(os.path.join(ct2_dir, "config.json")))
    try:
        m = json.load(open(manifest))
    except FileNotFoundError:
        m = {}
    m.setdefault("models", {})[name] = sec
    with open(manifest, "w") as f:
        json.dump(m, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
