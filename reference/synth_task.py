#!/usr/bin/env python3
"""Seeded synthetic translation task for the tiny fixture models.

Source sentences are sequences over a 36-symbol alphabet (a-z, 0-9) drawn with Zipf-like
weights (so fairseq-preprocess's frequency-sorted dictionaries have a non-trivial order).
Target = the source reversed, each symbol mapped through a fixed permutation, except that
source `9` becomes the two target tokens `X Y` (a length change).

Writes OUT/{train,valid,test}.{src,tgt} (test = the fixture inputs, see below) and
OUT/inputs.{src,tgt}:
  inputs: 72 sentences: lengths 1..12 like training, 12 longer (13..24) than any training
  sentence, and 2 with an out-of-vocabulary source symbol `zz` (target `ZZ`, also unknown).

Usage: synth_task.py OUT_DIR
"""
import os
import random
import sys

SEED = 20240611
ALPHABET = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
TRAIN_MAX_LEN = 12


def mapping(rng):
    perm = ALPHABET[:]
    rng.shuffle(perm)
    table = {s: [t] for s, t in zip(ALPHABET, perm)}
    table["9"] = ["X", "Y"]
    table["zz"] = ["ZZ"]
    return table


def target_of(src, table):
    out = []
    for s in reversed(src):
        out.extend(table[s])
    return out


def sample(rng, weights, lo, hi):
    n = rng.randint(lo, hi)
    return rng.choices(ALPHABET, weights=weights, k=n)


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for toks in lines:
            f.write(" ".join(toks) + "\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    table = mapping(rng)
    weights = [1.0 / (i + 2) ** 0.7 for i in range(len(ALPHABET))]

    splits = {"train": 20000, "valid": 400}
    for name, n in splits.items():
        srcs = [sample(rng, weights, 1, TRAIN_MAX_LEN) for _ in range(n)]
        write(os.path.join(out, f"{name}.src"), srcs)
        write(os.path.join(out, f"{name}.tgt"), [target_of(s, table) for s in srcs])

    inputs = []
    for i in range(58):
        inputs.append(sample(rng, weights, 1 + i % TRAIN_MAX_LEN, 1 + i % TRAIN_MAX_LEN))
    for n in range(TRAIN_MAX_LEN + 1, TRAIN_MAX_LEN + 13):
        inputs.append(sample(rng, weights, n, n))
    for pos in (0, 3):
        s = sample(rng, weights, 6, 6)
        s[pos] = "zz"
        inputs.append(s)
    write(os.path.join(out, "inputs.src"), inputs)
    write(os.path.join(out, "inputs.tgt"), [target_of(s, table) for s in inputs])
    # the test split is the inputs themselves (binarized for --score-reference)
    write(os.path.join(out, "test.src"), inputs)
    write(os.path.join(out, "test.tgt"), [target_of(s, table) for s in inputs])


if __name__ == "__main__":
    main()
