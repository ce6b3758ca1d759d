#!/usr/bin/env python3
"""Train the shared sentencepiece model of the multilingual fixtures and encode text with it.

  python reference/multilingual_spm.py train OUT_PREFIX VOCAB FILE...   # OUT_PREFIX.model/.vocab
  python reference/multilingual_spm.py encode MODEL < raw > pieces      # as fairseq's --bpe sentencepiece

`encode` writes " ".join(sp.EncodeAsPieces(line)) per line, exactly what
fairseq/data/encoders/sentencepiece_bpe.py SentencepieceBPE.encode does.
"""
import sys

import sentencepiece as spm


def main():
    cmd = sys.argv[1]
    if cmd == "train":
        prefix, vocab, files = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        spm.SentencePieceTrainer.train(
            input=",".join(files), model_prefix=prefix, vocab_size=vocab, model_type="bpe",
            character_coverage=1.0, seed_sentencepiece_size=1000000, num_threads=1,
            input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2,
        )
    elif cmd == "encode":
        sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
        out = sys.stdout
        for line in sys.stdin:
            out.write(" ".join(sp.EncodeAsPieces(line.rstrip("\n"))) + "\n")
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
