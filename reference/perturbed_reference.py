#!/usr/bin/env python3
"""A verify reference (reference/README.md) from a deliberately wrong model, which `tchseq verify`
must fail: fairseq 0.12.2 runs the fixture with every LayerNorm's eps set to EPS instead of 1e-5
(`--ln-eps`), or with one weight scaled by 1 + REL (`--scale-weight NAME REL`).

  source reference/env.sh
  python reference/perturbed_reference.py --fixture tests/fixtures/models/postnorm --side left \
      --ln-eps 1.1e-5 --out tests/fixtures/verify_tolerance/postnorm_ln_eps_1.1e-5_left.pt

Batch and format as goldens.py's verify_<side>.pt (the manifest's verify rows).
"""
import argparse
import json
import os
import runpy
import sys
import tempfile

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixture", required=True)
    p.add_argument("--side", choices=["left", "right"], default="left")
    p.add_argument("--ln-eps", type=float)
    p.add_argument("--scale-weight", nargs=2, metavar=("NAME", "REL"))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.ln_eps is not None:
        init = torch.nn.LayerNorm.__init__

        def patched(self, shape, eps=1e-5, *a, **k):
            init(self, shape, args.ln_eps, *a, **k)

        torch.nn.LayerNorm.__init__ = patched
    if args.scale_weight:
        name, rel = args.scale_weight[0], float(args.scale_weight[1])
        from fairseq.models import BaseFairseqModel

        load = BaseFairseqModel.load_state_dict

        def scaled(self, state_dict, *a, **k):
            state_dict[name] = state_dict[name] * (1 + rel)
            return load(self, state_dict, *a, **k)

        BaseFairseqModel.load_state_dict = scaled

    manifest = json.load(open("tests/fixtures/models/manifest.json"))
    fx = next(f for f in manifest["fixtures"] if os.path.normpath(f["dir"]) == os.path.normpath(args.fixture))
    rows = ",".join(str(r) for r in fx["goldens"]["verify_rows_of_inputs"])
    with tempfile.TemporaryDirectory() as tmp:
        sys.argv = ["goldens.py", "--data", fx["dir"], "--path", f"{fx['dir']}/model.pt", "--out", tmp,
                    "-s", "src", "-t", "tgt", "--sentences", manifest["inputs"]["src"], manifest["inputs"]["tgt"],
                    rows, "--sides", args.side]
        here = os.path.dirname(os.path.abspath(__file__))
        runpy.run_path(os.path.join(here, "goldens.py"), run_name="__main__")
        os.replace(f"{tmp}/verify_{args.side}.pt", args.out)


if __name__ == "__main__":
    main()
