"""fairseq 0.12.2 side of the Hugging Face / CTranslate2 checks: load a fixture the way its goldens
were made, encode raw lines with the fixture's own text pipeline, collate a batch the way
fairseq does (source left-padded, prev_output_tokens right-padded), and run fairseq's forward.
Shared by reference/hf_check.py and reference/ct2_check.py."""
import os

import torch

from fairseq import checkpoint_utils
from fairseq.data import data_utils

from verify_reference import forward as vr_forward, instrument, tensors as vr_tensors  # reference/

instrument()


class Fixture:
    """kind "m2m": a tests/fixtures/multilingual/m2m-style dir (translation_multi_simple_epoch,
    sentencepiece, `__lang__` tokens); kind "plain": a tests/fixtures/models fixture (translation
    task, whitespace symbols, no tokenizer or BPE)."""

    def __init__(self, kind, model_dir, src, tgt, checkpoint="model.pt"):
        self.kind, self.dir, self.src, self.tgt = kind, model_dir, src, tgt
        path = os.path.join(model_dir, checkpoint)
        if kind == "m2m":
            # the task flags of the committed goldens (tests/fixtures/multilingual/manifest.json)
            overrides = {
                "data": model_dir, "source_lang": src, "target_lang": tgt,
                "lang_dict": os.path.join(model_dir, "lang_list.txt"),
                "fixed_dictionary": os.path.join(model_dir, "model_dict.txt"),
                "left_pad_source": "True",
                "sentencepiece_model": os.path.join(model_dir, "sentencepiece.bpe.model"),
            }
        else:
            overrides = {"data": model_dir, "source_lang": src, "target_lang": tgt}
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
        self.model = models[0].eval()
        self.cfg, self.task = cfg, task
        self.sd, self.td = task.source_dictionary, task.target_dictionary
        self.sp = None
        if kind == "m2m":
            import sentencepiece as spm

            self.sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "sentencepiece.bpe.model"))

    def lang_id(self, lang):
        return self.sd.index(f"__{lang}__")

    def pieces(self, line):
        line = line.strip()
        if self.kind == "m2m":
            # fairseq's SentencepieceBPE.encode: " ".join(sp.EncodeAsPieces(x))
            return " ".join(self.sp.EncodeAsPieces(line))
        return line

    def source_ids(self, line, lang=None):
        """What fairseq-interactive feeds the encoder: [__src__] + symbols + </s> (m2m,
        `--encoder-langtok src`), symbols + </s> (plain)."""
        ids = self.sd.encode_line(self.pieces(line), add_if_not_exist=False, append_eos=True).long()
        if self.kind == "m2m":
            ids = torch.cat([torch.tensor([self.lang_id(lang or self.src)]), ids])
        return ids

    def target_ids(self, line, lang=None):
        """The target as training / --score-reference sees it: [__tgt__] + symbols + </s> (m2m),
        symbols + </s> (plain)."""
        ids = self.td.encode_line(self.pieces(line), add_if_not_exist=False, append_eos=True).long()
        if self.kind == "m2m":
            ids = torch.cat([torch.tensor([self.lang_id(lang or self.tgt)]), ids])
        return ids

    def batch(self, src_lines, tgt_lines=None, src_lang=None, tgt_lang=None):
        pad, eos = self.sd.pad(), self.sd.eos()
        srcs = [self.source_ids(l, src_lang) for l in src_lines]
        b = {
            "src_tokens": data_utils.collate_tokens(srcs, pad, eos, left_pad=True),
            "src_lengths": torch.tensor([len(s) for s in srcs]),
        }
        if tgt_lines is not None:
            tgts = [self.target_ids(l, tgt_lang) for l in tgt_lines]
            b["target"] = data_utils.collate_tokens(tgts, pad, eos, left_pad=False)
            b["prev_output_tokens"] = data_utils.collate_tokens(
                tgts, pad, eos, left_pad=False, move_eos_to_beginning=True)
        return b

    def forward(self, b):
        """fairseq's own forward (eval mode, no_grad) exactly as reference/verify_reference.py runs
        it for the verify goldens, returned batch-first ([B,S,C] / [B,T,C]), plus the decoder
        features after the final LayerNorm (what HF reports as its last decoder hidden state) and
        the encoder path fairseq took."""
        enc, dec, lprobs, fast, nested = vr_forward(self.model, b["src_tokens"], b["src_lengths"],
                                                    b["prev_output_tokens"])
        t = vr_tensors(b["src_tokens"], b["src_lengths"], b["prev_output_tokens"], enc, dec, lprobs, fast)
        n_enc = sum(1 for k in t if k.startswith("encoder_states."))
        n_dec = sum(1 for k in t if k.startswith("decoder_inner_states."))
        inner = [t[f"decoder_inner_states.{i}"].transpose(0, 1) for i in range(n_dec)]
        last = inner[-1]
        with torch.no_grad():
            if getattr(self.model.decoder, "layer_norm", None) is not None:
                last = self.model.decoder.layer_norm(last)
        return {
            "encoder_out": t["encoder_out"].transpose(0, 1),  # after the final encoder LN if any
            "encoder_states": [t[f"encoder_states.{i}"].transpose(0, 1) for i in range(n_enc)],
            "decoder_inner_states": inner,
            "decoder_features": last,
            "logits": t["logits"],
            "lprobs": t["lprobs"],
            "encoder_path": ("fast_bt_nested" if nested else "fast_bt") if fast else "fairseq_mha",
        }


def read_interactive(path):
    """fairseq-interactive stdout -> {id: {"S": pieces, "H": [(score, pieces)], "D": [...], "P": [...]}}"""
    out = {}
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if len(line) < 3 or line[1] != "-" or line[0] not in "SHDP":
            continue
        tag, rest = line.split("-", 1)
        parts = rest.split("\t")
        i = int(parts[0])
        e = out.setdefault(i, {"S": None, "H": [], "D": [], "P": []})
        if tag == "S":
            e["S"] = parts[1]
        elif tag == "H":
            e["H"].append((float(parts[1]), parts[2] if len(parts) > 2 else ""))
        elif tag == "D":
            e["D"].append((float(parts[1]), parts[2] if len(parts) > 2 else ""))
        elif tag == "P":
            e["P"].append([float(x) for x in parts[1].split()])
    return out
