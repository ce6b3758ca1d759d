"""Goldens for `tchseq score`'s batching: fairseq 0.12.2's own LanguagePairDataset.ordered_indices,
data_utils.batch_by_size (the compiled data_utils_fast) and collate's in-batch sort, on random
sentence lengths. Writes tests/fixtures/score/batching.json.

    source reference/env.sh && python reference/score_batching.py
"""
import json
import os
import sys

import numpy as np
import torch
from fairseq.data import data_utils, LanguagePairDataset

rng = np.random.RandomState(1234)
cases = []
for case in range(60):
    n = int(rng.randint(1, 120))
    src = rng.randint(1, 60, size=n).astype(np.int64)
    tgt = rng.randint(1, 60, size=n).astype(np.int64)
    if case % 5 == 0:  # many ties
        src = rng.randint(1, 4, size=n).astype(np.int64)
        tgt = rng.randint(1, 4, size=n).astype(np.int64)
    max_tokens = [None, 12000, 200, 64, 300][case % 5]
    max_sentences = [16, None, None, 7, 1][case % 5] if max_tokens is not None or case % 5 == 0 else 16
    mult = [8, 1, 8, 3, 8][case % 5]
    # ordered_indices exactly as LanguagePairDataset computes it (no shuffle, no buckets)
    indices = np.arange(n, dtype=np.int64)
    indices = indices[np.argsort(tgt[indices], kind="mergesort")]
    indices = indices[np.argsort(src[indices], kind="mergesort")]
    num_tokens = np.maximum(src, tgt)[indices]
    if max_tokens is not None and num_tokens.max() > max_tokens:
        continue
    batches = data_utils.batch_by_size(
        indices, None, num_tokens_vec=np.maximum(src, tgt)[indices],
        max_tokens=max_tokens, max_sentences=max_sentences,
        required_batch_size_multiple=mult,
    )
    # collate's "sort by descending source length" on each batch
    sorts = []
    for b in batches:
        lengths = torch.LongTensor([int(src[i]) for i in b])
        _, order = lengths.sort(descending=True)
        sorts.append(order.tolist())
    cases.append({
        "src_sizes": src.tolist(), "tgt_sizes": tgt.tolist(),
        "max_tokens": max_tokens, "max_sentences": max_sentences, "bsz_mult": mult,
        "ordered_indices": indices.tolist(),
        "batches": [b.tolist() for b in batches],
        "collate_order": sorts,
    })

out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "score", "batching.json")
with open(out, "w") as f:
    json.dump({"generator": "reference/score_batching.py", "fairseq": "0.12.2", "cases": cases}, f)
print(f"{len(cases)} cases -> {out}", file=sys.stderr)
