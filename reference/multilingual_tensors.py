#!/usr/bin/env python3
"""Activation golden (verify reference format, see reference/README.md) for a model of
tests/fixtures/multilingual: MODEL_DIR/verify.pt.

Usage: python reference/multilingual_tensors.py MODEL_DIR DATA_BIN SRC TGT MANIFEST [OVERRIDE=VALUE...]

Loads MODEL_DIR/model.pt with fairseq.checkpoint_utils.load_model_ensemble_and_task, the task
built from the checkpoint's own cfg.task with `data` -> DATA_BIN, source_lang/target_lang ->
SRC/TGT and the given overrides (the model dir's own dictionary / lang-list files), loads the
`test` split (tests/fixtures/multilingual/input.SRC / input.TGT binarized, made by
reference/family_goldens.sh prep) through the task's own load_dataset, so the source and target
carry the language tokens exactly as the task adds them, and collates items IDS with the
dataset's collater (left-padded source, prev_output_tokens = target shifted right, both as
fairseq-train / fairseq-generate --score-reference see them; the collater sorts the batch by
source length, longest first: the order is recorded as `ids`). Then, in eval mode under
torch.no_grad(): model.encoder(src_tokens, src_lengths, return_all_hiddens=True),
model.decoder(prev_output_tokens, encoder_out, src_lengths, return_all_hiddens=True),
model.get_normalized_probs(log_probs=True), saved with the keys of the verify format.
Encoder fast-path calls (torch._transformer_encoder_layer_fwd) are counted and recorded; if
taken, encoder_states[i>=1] are stored transposed to [S,B,C] as reference/goldens.py does.
"""
import json
import os
import sys

import torch
from fairseq import checkpoint_utils

from verify_reference import CALLS, forward, instrument, tensors  # reference/, this script's directory

IDS = [2, 0, 4, 6]
def main():
    model_dir, data, src, tgt, manifest = sys.argv[1:6]
    overrides = {"data": data, "source_lang": src, "target_lang": tgt}
    for kv in sys.argv[6:]:
        k, v = kv.split("=", 1)
        overrides[k] = v
    torch.manual_seed(1)
    instrument()
    path = os.path.join(model_dir, "model.pt")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
    model = models[0]
    model.eval()
    task.load_dataset("test")
    ds = task.dataset("test")
    batch = ds.collater([ds[i] for i in IDS])
    net = batch["net_input"]
    src_tokens, src_lengths, prev = net["src_tokens"], net["src_lengths"], net["prev_output_tokens"]
    enc, dec, lprobs, fast, nested = forward(model, src_tokens, src_lengths, prev)
    with torch.no_grad():
        # the whole model's forward (what the criterion / scorer calls) gives the same logits
        full = model(**net)
    assert torch.equal(full[0], dec[0])
    out = tensors(src_tokens, src_lengths, prev, enc, dec, lprobs, fast)
    dst = os.path.join(model_dir, "verify.pt")
    torch.save(out, dst)

    sd, td = task.source_dictionary, task.target_dictionary
    ids = batch["id"].tolist()
    rows = []
    for r in range(len(ids)):
        rows.append({
            "id": ids[r],
            "src_symbols": [sd[i] for i in src_tokens[r].tolist()],
            "prev_output_symbols": [td[i] for i in prev[r].tolist()],
            "target_symbols": [td[i] for i in batch["target"][r].tolist()],
        })
    # dictionary facts: sizes, specials, the language tokens / <mask> the task added, and what
    # the generator uses as eos / forces as the first target token / strips from the output
    facts = {}
    for name, d in (("source_dictionary", sd), ("target_dictionary", td)):
        extra = {d[i]: i for i in range(len(d)) if d[i].startswith(("__", "[", "<mask>"))
                 and (d[i].endswith(("__", "]")) or d[i] == "<mask>")}
        facts[name] = {"len": len(d), "bos": d.bos(), "pad": d.pad(), "eos": d.eos(), "unk": d.unk(),
                       "nspecial": d.nspecial, "added_tokens": extra}
    from fairseq.dataclass.configs import GenerationConfig

    gen = task.build_generator(models, GenerationConfig())  # fairseq-generate's defaults (beam 5)
    facts["generator"] = {
        "class": type(gen).__name__,
        "eos": int(gen.eos),
        "eos_symbol": td[int(gen.eos)],
        "symbols_to_strip_from_output": sorted(int(x) for x in getattr(gen, "symbols_to_strip_from_output", []) or []),
    }
    path_kind = "fairseq_mha"
    if fast:
        path_kind = "fast_bt_nested" if nested else "fast_bt"
    info = {
        "argv": ["python", "reference/multilingual_tensors.py"] + sys.argv[1:],
        "input": f"items {IDS} of the `test` split of {data} (= lines "
        + ",".join(str(i + 1) for i in IDS)
        + f" of tests/fixtures/multilingual/input.{{src,tgt}}), collated by the task's dataset",
        "ids": ids,
        "rows": rows,
        "encoder_path": path_kind,
        "transformer_encoder_layer_fwd_calls": CALLS["transformer_encoder_layer_fwd"],
        "shapes": {k: list(v.shape) for k, v in out.items()},
        "task": getattr(cfg.task, "_name", None),
        "dictionaries": facts,
    }
    print(json.dumps({k: info[k] for k in ("ids", "encoder_path", "shapes", "dictionaries")}))
    for r in rows:
        print(r["id"], " ".join(r["src_symbols"]), " || ", " ".join(r["prev_output_symbols"]))
    try:
        m = json.load(open(manifest))
    except FileNotFoundError:
        m = {}
    m.setdefault("tensors", {})[dst] = info
    json.dump(m, open(manifest, "w"), indent=1)


if __name__ == "__main__":
    main()
