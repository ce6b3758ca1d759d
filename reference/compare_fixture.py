#!/usr/bin/env python3
"""compare_fixture.py DIR_A DIR_B: checks that two builds of a fixture directory hold the same
goldens: every *.pt (tensor dicts or checkpoints' `model`) tensor-equal, every *.txt equal
except the W- (timing) lines, other files byte-equal. Exit 1 on any difference."""
import os
import sys

import torch


def tensors(path):
    obj = torch.load(path, map_location="cpu", weights_only=False)
    return obj["model"] if "model" in obj else obj


def main():
    a, b = sys.argv[1], sys.argv[2]
    bad = 0
    n = 0
    for dirpath, _, files in os.walk(a):
        for f in sorted(files):
            pa = os.path.join(dirpath, f)
            pb = os.path.join(b, os.path.relpath(pa, a))
            n += 1
            if not os.path.exists(pb):
                print(f"missing in B: {pb}"); bad += 1; continue
            if f.endswith(".pt"):
                ta, tb = tensors(pa), tensors(pb)
                same = list(ta) == list(tb) and all(
                    ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]) for k in ta)
            elif f.endswith(".txt"):
                la = [l for l in open(pa).read().splitlines() if not l.startswith("W-")]
                lb = [l for l in open(pb).read().splitlines() if not l.startswith("W-")]
                same = la == lb
            else:
                same = open(pa, "rb").read() == open(pb, "rb").read()
            if not same:
                print(f"differs: {os.path.relpath(pa, a)}"); bad += 1
    print(f"{n} files compared, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
