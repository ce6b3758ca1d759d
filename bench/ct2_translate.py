"""CTranslate2 side of `make bench`: translates pre-tokenized, BPE'd lines with a converted
fairseq model and prints fairseq-style lines, so bench.py parses every system the same way.

    python bench/ct2_translate.py MODEL_DIR INPUT --compute-type float32 --beam 5 \
        --batch-size 32 --inter-threads 1 --intra-threads 2 [--latency]

Without --latency, the whole input goes to one `translate_batch` call with max_batch_size
(CTranslate2 sorts by length and rebatches, as fairseq-interactive's --buffer-size does) and
prints `H-i<TAB>score<TAB>tokens`. With --latency, each line is translated alone and a
`W-i<TAB>seconds<TAB>seconds` line gives its time, like fairseq-interactive's W- lines.
"""
import argparse
import math
import sys
import time

import ctranslate2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("input")
    p.add_argument("--compute-type", default="float32")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--inter-threads", type=int, default=1)
    p.add_argument("--intra-threads", type=int, default=1)
    p.add_argument("--max-len", type=int, default=200, help="fairseq's --max-len-b (with --max-len-a 0)")
    p.add_argument("--min-len", type=int, default=1, help="fairseq's --min-len")
    p.add_argument("--latency", action="store_true")
    a = p.parse_args()
    translator = ctranslate2.Translator(
        a.model, device="cpu", compute_type=a.compute_type,
        inter_threads=a.inter_threads, intra_threads=a.intra_threads)
    lines = [l.split() for l in open(a.input, encoding="utf-8").read().splitlines()]
    # fairseq's defaults: max_len_b 200 (EOS included), lenpen 1 (CTranslate2 divides by the
    # length without EOS; fairseq divides by the length with it)
    opts = dict(beam_size=a.beam, length_penalty=1.0, max_decoding_length=a.max_len,
                min_decoding_length=a.min_len, return_scores=True)
    out = sys.stdout
    if a.latency:
        for i, toks in enumerate(lines):
            t = time.perf_counter()
            r = translator.translate_batch([toks], **opts)[0]
            out.write(f"W-{i}\t{time.perf_counter() - t:.6f}\tseconds\n")
            out.write(f"H-{i}\t{r.scores[0] / math.log(2)}\t{' '.join(r.hypotheses[0])}\n")
        return
    results = translator.translate_batch(lines, max_batch_size=a.batch_size, batch_type="examples", **opts)
    for i, r in enumerate(results):
        out.write(f"H-{i}\t{r.scores[0] / math.log(2)}\t{' '.join(r.hypotheses[0])}\n")


if __name__ == "__main__":
    main()
