#!/usr/bin/env python3
"""verify references saved straight from fairseq 0.12.2's encoder fast path, untouched.

goldens.py stores every `encoder_states.{i}` time-major ([S,B,C]). On a post-norm encoder with
relu in eval mode, fairseq runs each layer as torch._transformer_encoder_layer_fwd on a
batch-first tensor and returns `encoder_states[i >= 1]` as it got them: dense [B,S,C] (no
padding, or left padding with a [B,S] mask) or a nested tensor (right padding). `encoder_states.0`
(the input to layer 1) is time-major either way. This script saves what fairseq returns, as it
returns it (no transpose, no padding, no copy), for three batches:

  verify_fastpath_left.pt    the verify batch, left-padded: dense fast path, states [B,S,C]
  verify_fastpath_right.pt   the same batch right-padded: nested fast path, nested states
  verify_fastpath_square.pt  4 sentences, left-padded to 4 tokens: dense, and B == S, so the
                             layout cannot be told from the shape

(A batch without padding takes the nested path too: its all-false mask counts as left-aligned.)

and fails unless fairseq really took the fast path with the expected layout.

Usage (from the repository root): source reference/env.sh && python reference/fastpath_golden.py
       [--fixture DIR] [-s SRC] [-t TGT] [--sentences FILE.src FILE.tgt]
Prints a JSON summary on the last stdout line.
"""
import argparse
import json
import os
import sys

import torch

from fairseq import checkpoint_utils
from fairseq.data import data_utils

from verify_reference import CALLS, instrument, tensors  # reference/, this script's directory

# rows of tests/fixtures/models/inputs.src: the verify batch of goldens.py (fixtures.py
# VERIFY_ROWS), and three sentences of 3 symbols plus one of 1 (4 tokens with EOS: B == S == 4)
BATCHES = {
    "left": ("2,7,0,11,4,62,70", True),
    "right": ("2,7,0,11,4,62,70", False),
    "square": ("2,14,26,0", True),
}
def layout(i, t):
    """fairseq appends encoder_states[0] before the fast path turns the batch batch-first.
    check() has confirmed this from the shapes wherever B != S."""
    if t.is_nested:
        return "nested"
    return "time_major" if i == 0 else "batch_first"


def check(name, enc, b, s, layers, has_pads, left_pad):
    """Fail unless fairseq ran every layer on the fast path and returned what we expect."""
    fails = []
    if CALLS["transformer_encoder_layer_fwd"] != layers:
        fails.append(f"{CALLS['transformer_encoder_layer_fwd']} fast-path layer calls, expected {layers}")
    # a batch without padding has an all-false mask, which counts as left-aligned
    nested = not (has_pads and left_pad)
    if (CALLS["nested_tensor_from_mask"] > 0) != nested:
        fails.append(f"nested tensor used: {CALLS['nested_tensor_from_mask'] > 0}, expected {nested}")
    states = enc["encoder_states"]
    if len(states) != layers + 1:
        fails.append(f"{len(states)} encoder_states, expected {layers + 1}")
    for i, st in enumerate(states):
        if i == 0:
            ok = not st.is_nested and tuple(st.shape[:2]) == (s, b)
        elif nested:
            ok = st.is_nested and st.size(0) == b
        else:
            ok = not st.is_nested and tuple(st.shape[:2]) == (b, s)
        if not ok:
            shape = "nested" if st.is_nested else list(st.shape)
            fails.append(f"encoder_states.{i} is {shape} (B={b}, S={s})")
    if fails:
        raise SystemExit(f"{name}: fairseq did not take the expected fast path: " + "; ".join(fails))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixture", default="tests/fixtures/models/postnorm")
    p.add_argument("-s", "--source-lang", default="src")
    p.add_argument("-t", "--target-lang", default="tgt")
    p.add_argument("--sentences", nargs=2, metavar=("SRC", "TGT"),
                   default=["tests/fixtures/models/inputs.src", "tests/fixtures/models/inputs.tgt"])
    args = p.parse_args()

    torch.manual_seed(1)
    instrument()
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(args.fixture, "model.pt")],
        arg_overrides={"data": args.fixture, "source_lang": args.source_lang,
                       "target_lang": args.target_lang},
    )
    model = models[0]
    model.eval()
    layers = len(model.encoder.layers)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    src_lines = open(args.sentences[0], encoding="utf-8").read().splitlines()
    tgt_lines = open(args.sentences[1], encoding="utf-8").read().splitlines()

    summary = {}
    for name, (rows, left_pad) in BATCHES.items():
        idx = [int(i) for i in rows.split(",")]
        srcs = [src_dict.encode_line(src_lines[i], add_if_not_exist=False, append_eos=True).long() for i in idx]
        tgts = [tgt_dict.encode_line(tgt_lines[i], add_if_not_exist=False, append_eos=True).long() for i in idx]
        src_tokens = data_utils.collate_tokens(srcs, src_dict.pad(), src_dict.eos(), left_pad=left_pad)
        src_lengths = torch.LongTensor([t.numel() for t in srcs])
        prev_output_tokens = data_utils.collate_tokens(
            tgts, tgt_dict.pad(), tgt_dict.eos(), left_pad=False, move_eos_to_beginning=True)
        b, s = src_tokens.shape
        has_pads = bool(src_tokens.eq(src_dict.pad()).any())
        for k in CALLS:
            CALLS[k] = 0
        with torch.no_grad():
            enc = model.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=True)
            check(name, enc, b, s, layers, has_pads, left_pad)
            dec = model.decoder(prev_output_tokens, encoder_out=enc, src_lengths=src_lengths,
                                return_all_hiddens=True)
            lprobs = model.get_normalized_probs(dec, log_probs=True)
        out = tensors(src_tokens, src_lengths, prev_output_tokens, enc, dec, lprobs, fast=True, as_returned=True)
        path = os.path.join(args.fixture, f"verify_fastpath_{name}.pt")
        torch.save(out, path)
        summary[name] = {
            "file": os.path.basename(path),
            "rows_of_inputs": idx,
            "left_pad": left_pad,
            "batch": b,
            "src_len": s,
            "encoder_path": "fast_bt_nested" if CALLS["nested_tensor_from_mask"] else "fast_bt",
            "mask": "none" if not has_pads else ("nested" if not left_pad else "key_padding"),
            "encoder_states_layout": [layout(i, st) for i, st in enumerate(enc["encoder_states"])],
            "layout_ambiguous_from_shape": b == s,
        }
        print(f"{path}: B={b} S={s} {summary[name]['encoder_path']} "
              f"states {summary[name]['encoder_states_layout']}", file=sys.stderr)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
