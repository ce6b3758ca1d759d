#!/usr/bin/env python3
"""Turn a fairseq-train checkpoint into the fixture checkpoint files.

  release  IN OUT   drop last_optimizer_state (as release checkpoints do); everything else as
                    fairseq-train wrote it (zip container, `cfg` plain dict, args None)
  legacy   IN OUT   pre-1.6 container (_use_new_zipfile_serialization=False) with a flat
                    `args` argparse.Namespace and cfg None
  fp16     IN OUT   every floating tensor of state['model'] .half() (what --fp16 training
                    saves), cfg.common.fp16 = True
  layout2018 IN OUT 2018 key layout: fused self_attn/encoder_attn in_proj_weight/in_proj_bias,
                    layer_norms.N, decoder.embed_out, no version keys, no encoder-layer
                    BetterTransformer copies; legacy container + `args` like checkpoints of
                    that time

IN must be a checkpoint straight from fairseq-train (or `release` output). Files are written
the way fairseq writes them: torch.save to an open file object (zip prefix `archive/`).
"""
import argparse
import collections
import copy
import re
import sys

import torch


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def save(state, path, legacy=False):
    with open(path, "wb") as f:
        if legacy:
            torch.save(state, f, _use_new_zipfile_serialization=False)
        else:
            torch.save(state, f)


def release(state):
    state = dict(state)
    state.pop("last_optimizer_state", None)
    return state


def to_args(state):
    """Flat argparse.Namespace as fairseq <= 0.9 stored it: the legacy model Namespace already
    holds every flat training option; task/dataset options are folded in from cfg."""
    cfg = state["cfg"]
    ns = copy.deepcopy(cfg["model"])
    for section in ("common", "dataset", "optimization", "checkpoint", "distributed_training", "task"):
        for k, v in (cfg.get(section) or {}).items():
            if k != "_name" and getattr(ns, k, None) is None:
                setattr(ns, k, v)
    ns.task = cfg["task"]["_name"]
    return ns


def legacy(state):
    state = release(state)
    state["args"] = to_args(state)
    state["cfg"] = None
    return state


def fp16(state):
    state = release(state)
    state["model"] = collections.OrderedDict(
        (k, v.half() if v.is_floating_point() else v) for k, v in state["model"].items()
    )
    state["cfg"] = copy.deepcopy(state["cfg"])
    state["cfg"]["common"]["fp16"] = True
    return state


ENC_LN = {"self_attn_layer_norm": "0", "final_layer_norm": "1"}
DEC_LN = {"self_attn_layer_norm": "0", "encoder_attn_layer_norm": "1", "final_layer_norm": "2"}
BT_COPIES = ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias",
             "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")


def layout2018(state):
    state = legacy(state)
    sd = state["model"]
    out = collections.OrderedDict()
    for k, v in sd.items():
        m = re.match(r"(encoder|decoder)\.layers\.(\d+)\.(.*)$", k)
        if k in ("encoder.version", "decoder.version"):
            continue
        if m:
            side, i, rest = m.groups()
            if side == "encoder" and rest in BT_COPIES:
                continue
            am = re.match(r"(self_attn|encoder_attn)\.(q|k|v)_proj\.(weight|bias)$", rest)
            if am:
                attn, which, wb = am.groups()
                if which != "q":
                    continue
                base = f"{side}.layers.{i}.{attn}"
                out[f"{base}.in_proj_{wb}"] = torch.cat(
                    [sd[f"{base}.{p}_proj.{wb}"] for p in ("q", "k", "v")], dim=0
                )
                continue
            lm = re.match(r"(\w+_layer_norm)\.(weight|bias)$", rest)
            if lm:
                table = ENC_LN if side == "encoder" else DEC_LN
                out[f"{side}.layers.{i}.layer_norms.{table[lm.group(1)]}.{lm.group(2)}"] = v
                continue
            out[k] = v
        elif k == "decoder.output_projection.weight":
            out["decoder.embed_out"] = v
        else:
            out[k] = v
    state["model"] = out
    return state


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["release", "legacy", "fp16", "layout2018"])
    p.add_argument("inp")
    p.add_argument("out")
    a = p.parse_args()
    state = load(a.inp)
    new = {"release": release, "legacy": legacy, "fp16": fp16, "layout2018": layout2018}[a.kind](state)
    save(new, a.out, legacy=a.kind in ("legacy", "layout2018"))


if __name__ == "__main__":
    main()
