#!/usr/bin/env python3
"""The NLLB-200 counterpart of hf_random.py: a small M2M100ForConditionalGeneration in NLLB-200's
convention (NllbTokenizer, language codes `eng_Latn`, ...), built, initialised, saved and run by
transformers itself, plus transformers' own forward on a fixed batch as reference tensors.

Usage (repository root, `source reference/env.sh`, HF_HUB_OFFLINE=1):
  python reference/hf_random_nllb.py OUT_DIR MANIFEST   # OUT_DIR = tests/fixtures/hf/random-nllb

OUT_DIR gets the model dir as `save_pretrained` writes it (config.json, generation_config.json,
model.safetensors), the tokenizer as NllbTokenizer.save_pretrained writes it minus the files the
slow tokenizer does not need to load (kept: sentencepiece.bpe.model, tokenizer_config.json,
special_tokens_map.json; dropped: added_tokens.json, which only repeats tokenizer_config.json's
`added_tokens_decoder`), and reference.safetensors (see tests/fixtures/hf/README.md and
MANIFEST -> random_nllb for every tensor).

Vocabulary (NLLB-200's layout, with the 4000-piece sentencepiece model of
tests/fixtures/multilingual/m2m instead of NLLB's 256000-piece one): <s> 0, <pad> 1, </s> 2,
<unk> 3, sentencepiece piece k (k >= 3) at k + 1 (NllbTokenizer's fairseq_offset), then the 202
language codes in transformers' FAIRSEQ_LANGUAGE_CODES order, then <mask>: vocab_size 4204.
NllbTokenizer built from a bare sentencepiece file puts <mask> *before* the language codes (its
special tokens are added mask first); the ids above are NLLB-200's own (eng_Latn = spm size + 1 +
46, <mask> last), so they are given to the constructor as `added_tokens_decoder`, as
`from_pretrained` does with a saved directory.

Initialisation: as hf_random.py (same seed, init_std 0.1, LayerNorm weights 1 + N(0, 0.1),
LayerNorm / Linear biases N(0, 0.1)).
"""
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_random import (BASE, BATCH_LINES, SEED, batch_forward, batch_text, fairseq_from_hf, random_model,  # noqa: E402
                       reference_tensors, write_section)

SRC_LANG, TGT_LANG = "eng_Latn", "deu_Latn"
SHOW_LANGS = ("eng_Latn", "deu_Latn", "fra_Latn")


def main():
    out_dir, manifest = sys.argv[1:3]
    import sentencepiece as spm
    from safetensors.torch import save_file
    from transformers import AddedToken, AutoTokenizer, GenerationConfig, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    spm_src = "tests/fixtures/multilingual/m2m/sentencepiece.bpe.model"
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    spm_path = os.path.join(out_dir, "sentencepiece.bpe.model")
    shutil.copyfile(spm_src, spm_path)
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    n_spm = len(sp)
    assert [sp.IdToPiece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"], "spm specials not at 0..2"
    first_lang = n_spm + 1  # NllbTokenizer.vocab_size = len(sp_model) + fairseq_offset
    mask_id = first_lang + len(FAIRSEQ_LANGUAGE_CODES)
    vocab_size = mask_id + 1

    def special(s):
        return AddedToken(s, normalized=False, special=True)

    added = {0: special("<s>"), 1: special("<pad>"), 2: special("</s>"), 3: special("<unk>")}
    for i, code in enumerate(FAIRSEQ_LANGUAGE_CODES):
        added[first_lang + i] = special(code)
    added[mask_id] = AddedToken("<mask>", normalized=True, lstrip=True, special=True)
    tok = NllbTokenizer(vocab_file=spm_path, src_lang=SRC_LANG, tgt_lang=TGT_LANG, model_max_length=1024,
                        added_tokens_decoder=added)
    assert len(tok) == vocab_size, (len(tok), vocab_size)

    model = random_model(vocab_size, tokenizer_class="NllbTokenizer")
    config = model.config
    # NLLB-200's own generation_config.json: no beam settings, no forced tokens (the target
    # language is passed to generate as forced_bos_token_id)
    model.generation_config = GenerationConfig(
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, max_length=200)
    model.save_pretrained(out_dir, safe_serialization=True)
    saved = tok.save_pretrained(out_dir)
    written = sorted(os.path.basename(p) for p in saved if os.path.exists(p))
    dropped = []
    for f in ("added_tokens.json", "tokenizer.json"):
        if os.path.exists(os.path.join(out_dir, f)):
            os.remove(os.path.join(out_dir, f))
            dropped.append(f)

    # reload from disk: the reference is what from_pretrained gives
    model = M2M100ForConditionalGeneration.from_pretrained(out_dir, attn_implementation="eager").eval()
    tok = NllbTokenizer.from_pretrained(out_dir, src_lang=SRC_LANG, tgt_lang=TGT_LANG)
    assert len(tok) == vocab_size and not tok.legacy_behaviour

    # the id layout, from the tokenizer's own conversion functions
    conv = tok.convert_tokens_to_ids
    piece_ids = [conv(sp.IdToPiece(k)) for k in range(3, n_spm)]
    assert piece_ids == list(range(4, n_spm + 1)), "piece k is not at k + 1"
    assert conv(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    assert conv(list(FAIRSEQ_LANGUAGE_CODES)) == list(range(first_lang, mask_id))
    assert conv("<mask>") == mask_id == vocab_size - 1
    assert tok.convert_ids_to_tokens(list(range(n_spm + 1))) == ["<s>", "<pad>", "</s>", "<unk>"] + [
        sp.IdToPiece(k) for k in range(3, n_spm)]
    layout = {
        "specials": {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3},
        "pieces": {"first_id": 4, "last_id": n_spm, "first": tok.convert_ids_to_tokens(4),
                   "last": tok.convert_ids_to_tokens(n_spm), "rule": "id = sentencepiece id + 1 (spm ids 3.."
                   f"{n_spm - 1}; spm's own <unk>/<s>/</s> at 0/1/2 are replaced by ids 3/0/2)"},
        "language_codes": {"first_id": first_lang, "last_id": mask_id - 1, "count": len(FAIRSEQ_LANGUAGE_CODES),
                           "first": FAIRSEQ_LANGUAGE_CODES[0], "last": FAIRSEQ_LANGUAGE_CODES[-1],
                           "rule": f"id = {first_lang} + index in transformers' FAIRSEQ_LANGUAGE_CODES (not sorted)"},
        "<mask>": mask_id,
        "vocab_size": vocab_size,
        "ids": {l: conv(l) for l in SHOW_LANGS},
        "fairseq_names": {l: f"__{l}__" for l in SHOW_LANGS},
    }
    # AutoTokenizer picks the slow class from tokenizer_config.json (the fast one would be converted
    # from the sentencepiece model, which needs protobuf: not in the reference venv, not checked)
    auto = AutoTokenizer.from_pretrained(out_dir, use_fast=False, src_lang=SRC_LANG, tgt_lang=TGT_LANG)

    src_text, tgt_text = batch_text()
    enc = tok(src_text, text_target=tgt_text, padding=True, return_tensors="pt")
    input_ids, attention_mask, labels = enc["input_ids"], enc["attention_mask"], enc["labels"]
    # non-legacy layout: [lang] + spm pieces (+1) + [</s>]
    for row, ids, text, lang in [(r, input_ids, s, SRC_LANG) for r, s in enumerate(src_text)] + [
            (r, labels, s, TGT_LANG) for r, s in enumerate(tgt_text)]:
        want = [conv(lang)] + [i + 1 for i in sp.encode(text)] + [2]
        got = [i for i in ids[row].tolist() if i != 1]
        assert got == want, (lang, row, got, want)
    aenc = auto(src_text, text_target=tgt_text, padding=True, return_tensors="pt")
    auto_agrees = bool(torch.equal(aenc["input_ids"], input_ids) and torch.equal(aenc["labels"], labels))

    decoder_input_ids, decoder_attention_mask, out, out_sdpa, gen = batch_forward(
        model, out_dir, input_ids, attention_mask, labels, conv(TGT_LANG))
    t = reference_tensors(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, labels, out, gen)
    # one metadata key (safetensors writes the metadata map in hash order)
    meta = {"about": f"made by python reference/hf_random_nllb.py {' '.join(sys.argv[1:])}; batch: lines "
                     f"{[i + 1 for i in BATCH_LINES]} of {BASE}/input.en ({SRC_LANG}) -> input.de "
                     f"({TGT_LANG}); see tests/fixtures/hf/README.md"}
    save_file(t, os.path.join(out_dir, "reference.safetensors"), metadata=meta)

    fairseq_diffs = fairseq_from_hf(out_dir, t, vocab_size)
    print("[random-nllb fairseq forward on the HF weights] " + json.dumps(fairseq_diffs), flush=True)
    src_l, tgt_l = conv(SRC_LANG), conv(TGT_LANG)
    tokens = {
        "source_text": src_text, "target_text": tgt_text,
        "input_ids": input_ids.tolist(), "labels": labels.tolist(),
        "source_pieces": [tok.convert_ids_to_tokens(r) for r in input_ids.tolist()],
        "layout": layout,
        "legacy_behaviour": tok.legacy_behaviour,
        "tokenizer_files": {"written_by_save_pretrained": written, "removed": dropped,
                            "kept": sorted(f for f in os.listdir(out_dir) if f in (
                                "sentencepiece.bpe.model", "tokenizer_config.json", "special_tokens_map.json"))},
        "auto_tokenizer_use_fast_false": {"class": type(auto).__name__, "same_ids": auto_agrees},
    }
    tensors = {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} for k, v in t.items()}
    notes = {
        "input_ids": f"[B,S] NllbTokenizer(src_lang='{SRC_LANG}')(text, padding=True), legacy_behaviour false: [{SRC_LANG}({src_l})] + pieces + [</s>], RIGHT-padded with <pad>=1",
        "attention_mask": "[B,S] 1 = token, 0 = padding",
        "labels": f"[B,T] tokenizer(text_target=..., tgt_lang='{TGT_LANG}'): [{TGT_LANG}({tgt_l})] + pieces + [</s>], right-padded with 1",
        "decoder_input_ids": f"[B,T] shift_tokens_right(labels, 1, 2): [</s>, {TGT_LANG}, pieces..., (</s> on shorter rows)] (fairseq prev_output_tokens with __{TGT_LANG}__)",
        "decoder_attention_mask": "[B,T] decoder_input_ids != pad",
        "encoder_hidden_states.0": "[B,S,C] scaled token embedding + sinusoidal position (before any layer)",
        "encoder_hidden_states.1": "[B,S,C] output of encoder layer 1",
        "encoder_hidden_states.2": "[B,S,C] output of the LAST encoder layer AFTER the final encoder LayerNorm (= encoder_last_hidden_state)",
        "encoder_last_hidden_state": "[B,S,C] = encoder_hidden_states.2 (fairseq encoder_out)",
        "decoder_hidden_states.0": "[B,T,C] scaled embedding + position",
        "decoder_hidden_states.1": "[B,T,C] output of decoder layer 1",
        "decoder_hidden_states.2": "[B,T,C] last decoder layer AFTER the final decoder LayerNorm (the features fed to lm_head)",
        "logits": "[B,T,V] lm_head (tied to model.shared) of decoder_hidden_states.2, with decoder_attention_mask",
        "generate_beam5_sequences": f"[B,L] model.generate(input_ids, attention_mask, forced_bos_token_id={tgt_l} ({TGT_LANG}), num_beams=5, max_length=40) with generation_config.json (NLLB-200's: no early_stopping, no forced_eos): [2, {tgt_l}, ..., pad...]",
        "generate_beam5_sequences_scores": "[B] generate's normalized beam scores",
    }
    diffs = {"eager_vs_sdpa_logits_max_abs": float((out.logits - out_sdpa.logits).abs().max())}
    sec = {
        "dir": out_dir,
        "argv": ["python", "reference/hf_random_nllb.py"] + sys.argv[1:],
        "seed": SEED,
        "config": {k: v for k, v in config.to_dict().items() if k in (
            "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function",
            "scale_embedding", "max_position_embeddings", "init_std", "tie_word_embeddings", "tokenizer_class")},
        "reference_file": os.path.join(out_dir, "reference.safetensors"),
        "reference_computed_with": "M2M100ForConditionalGeneration.from_pretrained(dir, attn_implementation='eager'), eval, float32, torch.no_grad(), use_cache=False",
        "tensors": {k: {**tensors[k], "what": notes[k]} for k in t},
        "tokens": tokens,
        "checks": diffs,
        "fairseq_forward_on_hf_weights": {
            "what": "as random_m2m100: fairseq 0.12.2 TransformerModel with the HF weights under fairseq names; max abs diff vs the reference tensors over non-pad positions",
            "max_abs_diff": fairseq_diffs,
        },
        "generate_beam5_text": tok.batch_decode(gen.sequences, skip_special_tokens=True),
    }
    write_section(manifest, "random_nllb", sec)
    print(json.dumps({"dir": out_dir, "checks": diffs, "layout": layout, "auto": [type(auto).__name__, auto_agrees],
                      "written": written, "dropped": dropped, "shapes": {k: v["shape"] for k, v in tensors.items()}}))


if __name__ == "__main__":
    main()
