"""Lines per second of fairseq's moses + subword_nmt encoders (sacremoses + subword-nmt)."""
import sys
import time
from argparse import Namespace

from fairseq.data.encoders.moses_tokenizer import MosesTokenizer
from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE

lang, codes = sys.argv[1], sys.argv[2]
lines = [l.rstrip("\n") for l in sys.stdin]
tok = MosesTokenizer(Namespace(source_lang=lang, target_lang=lang, moses_no_dash_splits=False, moses_no_escape=False))
bpe = SubwordNMTBPE(Namespace(bpe_codes=codes, bpe_separator="@@"))
start = time.perf_counter()
tokens = sum(len(bpe.encode(tok.encode(l)).split(" ")) for l in lines)
secs = time.perf_counter() - start
print(f"python: {len(lines)} lines, {tokens} tokens in {secs:.2f}s = {len(lines) / secs:.0f} lines/s")
