#!/usr/bin/env python3
"""Tokenizer directories written by transformers' own tokenizer classes (`save_pretrained`), with
tiny random models beside them, and the ids transformers gives for them: the goldens tchseq's
token ids are held to (tests/it/hf_tokens.rs).

Run once per transformers release, each from its own venv (reference/hf_goldens.sh, step
`tokenizers`):
  python reference/hf_tokenizers.py OUT_ROOT    # writes OUT_ROOT/transformers-<version>/

Each release directory gets
  m2m100-langs/  M2M100Tokenizer over a vocab.json without language tokens (fairseq's dictionary of
                 tests/fixtures/text/spm/bpe.model: <s> <pad> </s> <unk>, then the pieces), and a
                 fairseq model's own three languages pinned at their fairseq ids (the dictionary's
                 size + index in the model's language list fr, en, de) as added tokens; the model's
                 table has exactly those rows (504), not the 100 `language_codes` ids
  nllb-langs/    NllbTokenizer over the same sentencepiece model with three languages (fra_Latn,
                 eng_Latn, deu_Latn) and <mask> at fairseq's ids after the pieces; transformers 5
                 saves no sentencepiece model (only tokenizer.json), so the one it was made from is
                 copied beside it
  fsmt/          FSMTTokenizer over tests/fixtures/hf/fsmt-postnorm's vocabulary files
  goldens.json   for each: the sentences, `tokenizer(...)` input_ids and labels (src_lang /
                 tgt_lang set), `convert_tokens_to_ids` of every language token, and the forced
                 BOS id transformers' translation inputs carry
The models (M2M100ForConditionalGeneration / FSMTForConditionalGeneration, d_model 8, one layer,
random) only make the directories loadable; nothing is computed with them.
"""
import json
import os
import shutil
import sys

import torch
import transformers

SPM = "tests/fixtures/text/spm/bpe.model"
FSMT_SRC = "tests/fixtures/hf/fsmt-postnorm"
SENTENCES = ["Hello world.", "The quick brown fox jumps over the lazy dog.", "Zoë's café, 2026 — naïve!"]
# in-vocabulary words only: an out-of-vocabulary word of several characters is one <unk> to
# fairseq (a model without BPE) but <unk> + pieces to FSMTTokenizer (tests/fixtures/hf/README.md)
FSMT_SENTENCES = ["i", "h y", "a t r", "q u i c k"]
M2M_LANGS = ["fr", "en", "de"]  # the fairseq model's lang_list order, deliberately unsorted
NLLB_LANGS = ["fra_Latn", "eng_Latn", "deu_Latn"]
V5 = int(transformers.__version__.split(".")[0]) >= 5
TINY = dict(d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=64, activation_function="relu",
            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def m2m100_model(out, rows):
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(0)
    config = M2M100Config(vocab_size=rows, tie_word_embeddings=True, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
                          architectures=["M2M100ForConditionalGeneration"], **TINY)
    M2M100ForConditionalGeneration(config).eval().save_pretrained(out, safe_serialization=True)


def fairseq_dictionary():
    """fairseq's dictionary of the sentencepiece model: its four specials, then every piece after
    the model's own <unk> <s> </s>."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=SPM)
    assert [sp.IdToPiece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"]
    return ["<s>", "<pad>", "</s>", "<unk>"] + [sp.IdToPiece(i) for i in range(3, len(sp))]


def added(pins):
    from transformers import AddedToken

    return {i: AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False) for i, t in pins.items()}


def ids_of(tok, texts):
    """`tokenizer(texts, text_target=texts)`: input_ids (src_lang) and labels (tgt_lang)."""
    enc = tok(texts, text_target=texts)
    return enc["input_ids"], enc["labels"]


def m2m100(out):
    from transformers import M2M100Tokenizer

    os.makedirs(out)
    vocab = {s: i for i, s in enumerate(fairseq_dictionary())}
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    shutil.copyfile(SPM, os.path.join(out, "sentencepiece.bpe.model"))
    pins = {len(vocab) + i: f"__{l}__" for i, l in enumerate(M2M_LANGS)}
    tok = M2M100Tokenizer(vocab_file=os.path.join(out, "vocab.json"), spm_file=os.path.join(out, "sentencepiece.bpe.model"),
                          src_lang="en", tgt_lang="de", model_max_length=64, added_tokens_decoder=added(pins))
    tok.save_pretrained(out)
    m2m100_model(out, len(vocab) + len(M2M_LANGS))
    tok = M2M100Tokenizer.from_pretrained(out, src_lang="en", tgt_lang="de")
    input_ids, labels = ids_of(tok, SENTENCES)
    translation = tok._build_translation_inputs(SENTENCES[:1], src_lang="en", tgt_lang="de")
    return {
        "dir": "m2m100-langs", "tokenizer_class": type(tok).__name__, "src_lang": "en", "tgt_lang": "de",
        "sentences": SENTENCES, "input_ids": input_ids, "labels": labels,
        "convert_tokens_to_ids": {f"__{l}__": tok.convert_tokens_to_ids(f"__{l}__") for l in M2M_LANGS},
        "get_lang_id": {l: tok.get_lang_id(l) for l in M2M_LANGS},
        "forced_bos_token_id": int(translation["forced_bos_token_id"]),
        "rows": len(vocab) + len(M2M_LANGS),
        "note": "M2M100Tokenizer's prefix token (input_ids[0], labels[0]) and forced BOS come from get_lang_id: "
                "len(vocab.json) + index in its 100-language list, whatever the added tokens pin; "
                "convert_tokens_to_ids gives the pinned ids, the rows the model was trained with",
    }


def nllb(out):
    from transformers import NllbTokenizer

    os.makedirs(out)
    n = len(fairseq_dictionary())
    pins = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"}
    pins.update({n + i: l for i, l in enumerate(NLLB_LANGS)})
    pins[n + len(NLLB_LANGS)] = "<mask>"
    if V5:
        # transformers 5's NllbTokenizer reads a sentencepiece model only through from_pretrained
        src = out + ".spm"
        os.makedirs(src)
        shutil.copyfile(SPM, os.path.join(src, "sentencepiece.bpe.model"))
        config = {"tokenizer_class": "NllbTokenizer", "extra_special_tokens": NLLB_LANGS, "src_lang": "eng_Latn",
                  "tgt_lang": "deu_Latn", "model_max_length": 64,
                  "added_tokens_decoder": {str(i): {"content": t, "special": True, "normalized": False, "lstrip": False,
                                                    "rstrip": False, "single_word": False} for i, t in pins.items()}}
        with open(os.path.join(src, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2)
        tok = NllbTokenizer.from_pretrained(src, src_lang="eng_Latn", tgt_lang="deu_Latn")
        tok.save_pretrained(out)
        shutil.rmtree(src)
        shutil.copyfile(SPM, os.path.join(out, "sentencepiece.bpe.model"))
    else:
        shutil.copyfile(SPM, os.path.join(out, "sentencepiece.bpe.model"))
        tok = NllbTokenizer(vocab_file=os.path.join(out, "sentencepiece.bpe.model"), src_lang="eng_Latn",
                            tgt_lang="deu_Latn", model_max_length=64, additional_special_tokens=NLLB_LANGS,
                            added_tokens_decoder=added(pins))
        tok.save_pretrained(out)
    m2m100_model(out, n + len(NLLB_LANGS) + 1)
    tok = NllbTokenizer.from_pretrained(out, src_lang="eng_Latn", tgt_lang="deu_Latn")
    input_ids, labels = ids_of(tok, SENTENCES)
    translation = tok._build_translation_inputs(SENTENCES[:1], src_lang="eng_Latn", tgt_lang="deu_Latn", return_tensors=None)
    return {
        "dir": "nllb-langs", "tokenizer_class": type(tok).__name__, "src_lang": "eng_Latn", "tgt_lang": "deu_Latn",
        "sentences": SENTENCES, "input_ids": input_ids, "labels": labels,
        "convert_tokens_to_ids": {t: tok.convert_tokens_to_ids(t) for t in NLLB_LANGS + ["<mask>"]},
        "forced_bos_token_id": int(translation["forced_bos_token_id"]),
        "rows": n + len(NLLB_LANGS) + 1,
    }


def fsmt(out):
    from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

    os.makedirs(out)
    tok = FSMTTokenizer(langs=["src", "tgt"], src_vocab_file=os.path.join(FSMT_SRC, "vocab-src.json"),
                        tgt_vocab_file=os.path.join(FSMT_SRC, "vocab-tgt.json"),
                        merges_file=os.path.join(FSMT_SRC, "merges.txt"), do_lower_case=False, model_max_length=64)
    tok.save_pretrained(out)
    torch.manual_seed(0)
    tiny = {k: v for k, v in TINY.items() if k not in ("bos_token_id",)}
    config = FSMTConfig(langs=["src", "tgt"], src_vocab_size=tok.src_vocab_size, tgt_vocab_size=tok.tgt_vocab_size,
                        tie_word_embeddings=True, architectures=["FSMTForConditionalGeneration"], **tiny)
    FSMTForConditionalGeneration(config).eval().save_pretrained(out, safe_serialization=True)
    tok = FSMTTokenizer.from_pretrained(out)
    input_ids = tok(FSMT_SENTENCES)["input_ids"]
    return {"dir": "fsmt", "tokenizer_class": type(tok).__name__, "src_lang": "src", "tgt_lang": "tgt",
            "sentences": FSMT_SENTENCES, "input_ids": input_ids}


def main():
    root = os.path.join(sys.argv[1], f"transformers-{transformers.__version__}")
    if os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)
    goldens = {"made_by": f"python reference/hf_tokenizers.py {sys.argv[1]}",
               "transformers": transformers.__version__,
               "models": [m2m100(os.path.join(root, "m2m100-langs")), nllb(os.path.join(root, "nllb-langs")),
                          fsmt(os.path.join(root, "fsmt"))]}
    text = json.dumps(goldens, indent=1, ensure_ascii=False)
    with open(os.path.join(root, "goldens.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    for m in goldens["models"]:
        print(m["dir"], {k: m[k] for k in ("convert_tokens_to_ids", "forced_bos_token_id") if k in m}, m["input_ids"][0])


if __name__ == "__main__":
    main()
