"""A model directory at a deployed size for `make bench`, built by fairseq 0.12.2's own
`build_model` with its random initialization and saved as fairseq-train saves (zip, cfg): model.pt,
dict.src.txt, dict.tgt.txt (one synthetic joint dictionary) and input.src (random sentences of it).
Random weights decode random tokens; the benchmark therefore decodes a fixed length.

    python reference/make_size_model.py OUT_DIR --size base|big|m2m [--lines 128] [--seed 0]

  base transformer (base): d512, 8 heads, FFN 2048, 6+6 post-norm, 32k vocabulary
  big  transformer_vaswani_wmt_en_de_big: d1024, 16 heads, FFN 4096, 6+6 post-norm, 32k vocabulary
  m2m  M2M-100 418M's shape: d1024, 16 heads, FFN 4096, 12+12 pre-norm, 128k vocabulary
       (a translation-task model: the benchmark is about the arithmetic and the memory)
"""
import argparse
import json
import os
import random

import torch
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models.transformer import TransformerModel
from fairseq.options import get_training_parser, parse_args_and_arch

SIZES = {
    "base": (32000, ["--arch", "transformer"]),
    "big": (32000, ["--arch", "transformer_vaswani_wmt_en_de_big"]),
    "m2m": (128112, ["--arch", "transformer_wmt_en_de_big", "--encoder-layers", "12", "--decoder-layers", "12",
                     "--encoder-normalize-before", "--decoder-normalize-before"]),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--size", choices=sorted(SIZES), required=True)
    p.add_argument("--lines", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    vocab, arch = SIZES[a.size]
    d = Dictionary()
    for i in range(vocab - 4):
        d.add_symbol(f"w{i}", n=vocab - i)
    for side in ("src", "tgt"):
        d.save(os.path.join(a.out, f"dict.{side}.txt"))
    args = parse_args_and_arch(get_training_parser(), ["/dev/null", *arch, "--share-all-embeddings", "--task",
                                                       "translation", "-s", "src", "-t", "tgt"])

    class Task:
        source_dictionary = d
        target_dictionary = d

    model = TransformerModel.build_model(args, Task())
    # what fairseq-train records after zero updates, without optimizer state
    history = [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None}, "num_updates": 0}]
    state = {"args": None, "cfg": convert_namespace_to_omegaconf(args), "model": model.state_dict(),
             "optimizer_history": history, "extra_state": {"epoch": 1}}
    torch.save(state, os.path.join(a.out, "model.pt"))
    rng = random.Random(a.seed)
    with open(os.path.join(a.out, "input.src"), "w") as f:
        for _ in range(a.lines):
            f.write(" ".join(f"w{rng.randrange(vocab - 4)}" for _ in range(rng.randint(12, 30))) + "\n")
    # without fairseq 0.12.2's encoder fast-path copies, which it derives from the others
    copies = ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")
    parameters = sum(p.numel() for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] not in copies)
    info = {"size": a.size, "vocab": len(d), "parameters": parameters, "arch": " ".join(arch)}
    with open(os.path.join(a.out, "info.json"), "w") as f:
        json.dump(info, f)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
