"""fairseq 0.12.2 goldens for forced target prefixes (fairseq's `prefix_tokens`, which
fairseq-interactive never passes): the bundled model through fairseq's hub interface,
`generate(..., inference_step_args={"prefix_tokens": ...})`, one sentence per call, beam 5, nbest 2.
Writes tests/fixtures/decoding/prefix.json.
    source reference/env.sh && python reference/prefix_goldens.py
"""
import json
import os

from fairseq.models.transformer import TransformerModel
from sacremoses import MosesTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M = os.path.join(ROOT, "weights/multi30k.en-de")
CASES = [
    ("A man in an orange hat starring at something.", "Ein Herr"),
    ("Two dogs are playing in the snow.", "Im Schnee"),
    ("A little girl is eating an ice cream.", "Ein kleines Kind"),
    ("A woman is reading a book.", "Eine Frau liest"),
    ("A boy jumps into a lake.", "Ein Junge"),
    ("Children are dancing.", ""),
]

hub = TransformerModel.from_pretrained(M, checkpoint_file="model.pt", tokenizer="moses", bpe="subword_nmt",
                                       bpe_codes=os.path.join(M, "bpecodes"))
hub.eval()
target_moses = MosesTokenizer("de")
out = []
for source, prefix in CASES:
    tokens = hub.encode(source)
    bpe = hub.apply_bpe(target_moses.tokenize(prefix, return_str=True, escape=False)) if prefix else ""
    prefix_ids = hub.tgt_dict.encode_line(bpe, add_if_not_exist=False, append_eos=False).long()
    args = {"prefix_tokens": prefix_ids.unsqueeze(0)} if prefix else {}
    hypos = hub.generate([tokens], beam=5, inference_step_args=args)[0][:2]
    out.append({
        "source": source,
        "prefix": prefix,
        "prefix_tokens": bpe,
        "hypotheses": [{
            "tokens": hub.tgt_dict.string(h["tokens"]),
            "text": hub.decode(h["tokens"]),
            "score": h["score"].item(),
            "positional_scores": h["positional_scores"].tolist(),
        } for h in hypos],
    })
with open(os.path.join(ROOT, "tests/fixtures/decoding/prefix.json"), "w") as f:
    json.dump(out, f, indent=1, ensure_ascii=False)
print("wrote tests/fixtures/decoding/prefix.json")
