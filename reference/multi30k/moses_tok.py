"""Moses-tokenize stdin -> stdout exactly as fairseq's `--tokenizer moses` encodes.

Usage: python moses_tok.py LANG < raw > tok
Uses fairseq's own MosesTokenizer (sacremoses, aggressive dash splits on, escape on).
"""
import sys

from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig


def main():
    lang = sys.argv[1]
    tok = MosesTokenizer(MosesTokenizerConfig(source_lang=lang, target_lang=lang))
    out = sys.stdout
    for line in sys.stdin:
        out.write(tok.encode(line.rstrip("\n")) + "\n")


if __name__ == "__main__":
    main()
