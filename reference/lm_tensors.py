#!/usr/bin/env python3
"""Activation golden for a fairseq language model: MODEL_DIR/verify.pt.

Usage: python reference/lm_tensors.py MODEL_DIR EVAL_BIN [MANIFEST]
  MODEL_DIR  hub-style dir with model.pt (tests/fixtures/lm/<name>)
  EVAL_BIN   data-bin whose `test` split is tests/fixtures/lm/input.en binarized with the LM's
             dict.txt (reference/work/lm/eval-bin, made by reference/lm_goldens.sh)
  MANIFEST   optional manifest.json to record the run in (key "tensors")

Loads the model with fairseq.checkpoint_utils.load_model_ensemble_and_task (as fairseq-eval-lm
does), with the task built from the checkpoint's own cfg.task and only `data` (-> EVAL_BIN) and
`sample_break_mode` (-> eos) overridden, so add_bos_token etc. come from the checkpoint. Takes
items 0, 4, 8, 36 of the `test` split (= lines 1, 5, 9, 37 of input.en: 12, 10, 8, 12 tokens
with eos; line 37 contains an <unk>) as eval-lm's `--sample-break-mode eos` dataset presents them
(TokenBlockDataset + MonolingualDataset, collated: right-padded with pad), runs model(src_tokens)
in eval mode under torch.no_grad and saves
  src_tokens [B,T] i64, target [B,T] i64   (pad = 1 where padded)
  logits [B,T,V] f32   decoder output before log_softmax (model(src_tokens)[0])
  lprobs [B,T,V] f32   model.get_normalized_probs((logits, extra), log_probs=True)
  hidden [B,T,C] f32   model.decoder.extract_features(src_tokens)[0] (after the final layer norm
                       when the model has one; input of the output projection)
  weights              dict(model.state_dict())
Rows are computed for padded positions too (fairseq masks pad keys in self-attention, but the pad
query positions still produce values): compare only where target != pad.
"""
import json
import os
import sys

import torch
from fairseq import checkpoint_utils


def main():
    model_dir, eval_bin = sys.argv[1], sys.argv[2]
    manifest = sys.argv[3] if len(sys.argv) > 3 else None
    path = os.path.join(model_dir, "model.pt")
    overrides = {"data": eval_bin, "sample_break_mode": "eos"}
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides=overrides
    )
    model = models[0]
    model.eval()
    task.load_dataset("test")
    ds = task.dataset("test")
    ids = [0, 4, 8, 36]
    batch = ds.collater([ds[i] for i in ids])
    src = batch["net_input"]["src_tokens"]
    tgt = batch["target"]
    with torch.no_grad():
        out = model(src)
        logits = out[0]
        lprobs = model.get_normalized_probs(out, log_probs=True)
        hidden = model.decoder.extract_features(src, encoder_out=None)[0]
    # the same forward through the path eval-lm uses (net_input incl. src_lengths)
    with torch.no_grad():
        out2 = model(**batch["net_input"])
    assert torch.equal(out2[0], logits)
    res = {
        "src_tokens": src.clone(),
        "target": tgt.clone(),
        "logits": logits.float().contiguous(),
        "lprobs": lprobs.float().contiguous(),
        "hidden": hidden.float().contiguous(),
        "weights": dict(model.state_dict()),
    }
    dst = os.path.join(model_dir, "verify.pt")
    torch.save(res, dst)
    size = os.path.getsize(dst)
    print(f"{dst}: {size} bytes; src {tuple(src.shape)} logits {tuple(logits.shape)} "
          f"hidden {tuple(hidden.shape)}; add_bos_token={cfg.task.add_bos_token}")
    if manifest:
        try:
            m = json.load(open(manifest))
        except FileNotFoundError:
            m = {}
        m.setdefault("tensors", {})[dst] = {
            "argv": ["python", "reference/lm_tensors.py"] + sys.argv[1:3],
            "input": "items " + ",".join(map(str, ids)) + " (= lines "
            + ",".join(str(i + 1) for i in ids) + " of tests/fixtures/lm/input.en) of the `test` split of "
            + eval_bin + ", as eval-lm --sample-break-mode eos presents them, collated in this order",
            "notes": "task built from the checkpoint cfg with overrides " + json.dumps(overrides)
            + "; keys src_tokens, target, logits, lprobs, hidden, weights",
        }
        json.dump(m, open(manifest, "w"), indent=1)


if __name__ == "__main__":
    main()
