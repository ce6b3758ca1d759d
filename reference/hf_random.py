#!/usr/bin/env python3
"""A small M2M100ForConditionalGeneration built, initialised, saved and run by transformers itself,
with the M2M-100 fixture's sentencepiece model and dictionary, plus transformers' own forward on a
fixed batch as reference tensors.

Usage (repository root, `source reference/env.sh`, HF_HUB_OFFLINE=1):
  python reference/hf_random.py OUT_DIR MANIFEST        # OUT_DIR = tests/fixtures/hf/random-m2m100

OUT_DIR gets the model dir as `save_pretrained` writes it (config.json, generation_config.json,
model.safetensors) and the tokenizer as M2M100Tokenizer.save_pretrained writes it (vocab.json,
sentencepiece.bpe.model, tokenizer_config.json, special_tokens_map.json), and reference.safetensors
(see tests/fixtures/hf/README.md and MANIFEST -> random_m2m100 for every tensor).

Vocabulary (transformers' M2M-100 convention, unlike the converted fixture): vocab.json = the
fairseq dictionary of tests/fixtures/multilingual/m2m without language tokens (3968 entries:
<s>, <pad>, </s>, <unk>, then model_dict.txt), language tokens `__xx__` = 3968 + index of xx in
transformers' hard-coded 100-language M2M-100 list (`__de__` 3984, `__en__` 3986, `__fr__` 3992),
then 8 `madeupword` slots: vocab_size 4076.

Initialisation: torch.manual_seed(SEED), transformers' own init with config.init_std 0.1; then,
with the same generator, every LayerNorm weight is set to 1 + N(0, 0.1) and every LayerNorm /
Linear bias to N(0, 0.1), so that no tensor is trivially 0 or 1 (a loader that drops a bias or
swaps gamma and beta fails the comparison). The padding row of the embedding stays 0 (as
transformers' init leaves it).
"""
import json
import os
import shutil
import sys

import torch

SEED = 20240611
BATCH_LINES = [0, 2, 6]  # lines 1, 3, 7 of input.en / input.de (different lengths -> padding)
BASE = "tests/fixtures/multilingual"


def write_section(manifest, key, sec):
    """Puts `sec` under `key` in the manifest, keeping what the other steps wrote there."""
    try:
        m = json.load(open(manifest))
    except FileNotFoundError:
        m = {}
    m[key] = sec
    with open(manifest, "w") as f:
        json.dump(m, f, indent=1, ensure_ascii=False)
        f.write("\n")


def random_model(vocab_size, **config):
    """A small `M2M100ForConditionalGeneration` as transformers initializes it (under SEED), then
    its layer norms and biases drawn away from 1 and 0 (under SEED + 1), so that a dropped or
    misplaced one shows. `config`: more `M2M100Config` fields."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(SEED)
    config = M2M100Config(
        vocab_size=vocab_size, max_position_embeddings=1024, d_model=32,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="relu",
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, init_std=0.1, scale_embedding=True,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        tie_word_embeddings=True, architectures=["M2M100ForConditionalGeneration"], **config,
    )
    model = M2M100ForConditionalGeneration(config).eval()
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(1 + 0.1 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
            elif isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
    return model


def batch_text():
    """The batch: BATCH_LINES of the multilingual fixtures' input.en, and of input.de."""
    en = [l.rstrip("\n") for l in open(f"{BASE}/input.en", encoding="utf-8")]
    de = [l.rstrip("\n") for l in open(f"{BASE}/input.de", encoding="utf-8")]
    return [en[i] for i in BATCH_LINES], [de[i] for i in BATCH_LINES]


def batch_forward(model, out_dir, input_ids, attention_mask, labels, forced_bos_token_id):
    """The decoder's input and its mask (`shift_tokens_right` of the labels), the eager forward
    with every hidden state, the same forward of the directory loaded with sdpa attention, and
    beam 5 `generate` forcing `forced_bos_token_id`."""
    from transformers import M2M100ForConditionalGeneration
    from transformers.models.m2m_100.modeling_m2m_100 import shift_tokens_right

    config = model.config
    decoder_input_ids = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
    decoder_attention_mask = decoder_input_ids.ne(config.pad_token_id).long()
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                    decoder_attention_mask=decoder_attention_mask, output_hidden_states=True, use_cache=False)
        sdpa = M2M100ForConditionalGeneration.from_pretrained(out_dir, attn_implementation="sdpa").eval()
        out_sdpa = sdpa(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                        decoder_attention_mask=decoder_attention_mask, use_cache=False)
        gen = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                             forced_bos_token_id=forced_bos_token_id, num_beams=5, max_length=40,
                             return_dict_in_generate=True, output_scores=True)
    return decoder_input_ids, decoder_attention_mask, out, out_sdpa, gen


def reference_tensors(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, labels, out, gen):
    """reference.safetensors' tensors: the batch, transformers' forward and its beam search."""
    t = {
        "input_ids": input_ids, "attention_mask": attention_mask.long(),
        "decoder_input_ids": decoder_input_ids, "decoder_attention_mask": decoder_attention_mask,
        "labels": labels,
        "encoder_last_hidden_state": out.encoder_last_hidden_state,
        "logits": out.logits,
        "generate_beam5_sequences": gen.sequences,
        "generate_beam5_sequences_scores": gen.sequences_scores,
    }
    for i, h in enumerate(out.encoder_hidden_states):
        t[f"encoder_hidden_states.{i}"] = h
    for i, h in enumerate(out.decoder_hidden_states):
        t[f"decoder_hidden_states.{i}"] = h
    return {k: v.detach().contiguous().clone() for k, v in t.items()}


def fairseq_from_hf(out_dir, t, vocab_size):
    """The mapping table in the other direction: build a fairseq 0.12.2 TransformerModel with the
    same hyper-parameters (pre-norm, final LayerNorms, sinusoidal, shared embeddings), load the
    HF weights under fairseq names, run fairseq's forward on the reference batch and compare."""
    import argparse

    from fairseq.data import Dictionary
    from fairseq.models.transformer import TransformerModel, base_architecture
    from safetensors.torch import load_file

    hf = load_file(os.path.join(out_dir, "model.safetensors"))
    d = Dictionary()
    while len(d) < vocab_size:
        d.add_symbol(f"sym{len(d)}")
    args = argparse.Namespace(
        arch="transformer", encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2,
        encoder_attention_heads=4, decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2,
        decoder_attention_heads=4, encoder_normalize_before=True, decoder_normalize_before=True,
        share_all_embeddings=True, share_decoder_input_output_embed=True, activation_fn="relu",
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        max_source_positions=1024, max_target_positions=1024, no_scale_embedding=False)
    base_architecture(args)

    class Task:
        source_dictionary = d
        target_dictionary = d

    model = TransformerModel.build_model(args, Task()).eval()
    fs = {}
    for k, v in hf.items():
        if k == "model.shared.weight":
            for n in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight"):
                fs[n] = v
        elif k.startswith("model."):
            fs[k[len("model."):]] = v
        else:
            raise SystemExit(f"unexpected HF key {k}")
    # without `<side>.version` >= 2, fairseq's upgrade_state_dict_named treats the dict as a
    # pre-2019 checkpoint and DELETES the final encoder/decoder LayerNorm (layer_norm = None)
    fs["encoder.version"] = torch.tensor([3.0])
    fs["decoder.version"] = torch.tensor([3.0])
    res = model.load_state_dict(fs, strict=False)
    assert model.encoder.layer_norm is not None and model.decoder.layer_norm is not None
    missing = [k for k in res.missing_keys if not k.endswith("_float_tensor")]
    if missing or res.unexpected_keys:
        raise SystemExit(f"fairseq load: missing {missing} unexpected {res.unexpected_keys}")
    src, prev = t["input_ids"], t["decoder_input_ids"]
    src_mask, tgt_mask = t["attention_mask"].bool(), t["decoder_attention_mask"].bool()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_mask.sum(-1), return_all_hiddens=True)
        dec = model.decoder(prev, encoder_out=enc, return_all_hiddens=True)
    out = {"encoder_last_hidden_state": enc["encoder_out"][0].transpose(0, 1), "logits": dec[0]}
    diffs = {
        "encoder_last_hidden_state": float((out["encoder_last_hidden_state"] - t["encoder_last_hidden_state"]).abs()[src_mask].max()),
        "logits": float((out["logits"] - t["logits"]).abs()[tgt_mask].max()),
    }
    for i in range(2):
        diffs[f"encoder_hidden_states.{i}"] = float(
            (enc["encoder_states"][i].transpose(0, 1) - t[f"encoder_hidden_states.{i}"]).abs()[src_mask].max())
        diffs[f"decoder_hidden_states.{i}"] = float(
            (dec[1]["inner_states"][i].transpose(0, 1) - t[f"decoder_hidden_states.{i}"]).abs()[tgt_mask].max())
    return diffs


def main():
    out_dir, manifest = sys.argv[1:3]
    from safetensors.torch import save_file
    from transformers import GenerationConfig, M2M100ForConditionalGeneration, M2M100Tokenizer

    src_dir = "tests/fixtures/multilingual/m2m"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_convert import read_fairseq_dict

    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    syms = read_fairseq_dict(os.path.join(src_dir, "model_dict.txt"))
    vocab = {s: i for i, s in enumerate(syms)}
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    shutil.copyfile(os.path.join(src_dir, "sentencepiece.bpe.model"), os.path.join(out_dir, "sentencepiece.bpe.model"))
    tok = M2M100Tokenizer(vocab_file=os.path.join(out_dir, "vocab.json"),
                          spm_file=os.path.join(out_dir, "sentencepiece.bpe.model"),
                          language_codes="m2m100", num_madeup_words=8, model_max_length=1024,
                          src_lang="en", tgt_lang="de")
    vocab_size = len(vocab) + 100 + 8

    model = random_model(vocab_size)
    config = model.config
    model.generation_config = GenerationConfig(
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=2, num_beams=5, early_stopping=True, max_length=200)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)

    # reload from disk: the reference is what from_pretrained gives
    model = M2M100ForConditionalGeneration.from_pretrained(out_dir, attn_implementation="eager").eval()
    tok = M2M100Tokenizer.from_pretrained(out_dir, src_lang="en", tgt_lang="de")
    src_text, tgt_text = batch_text()
    enc = tok(src_text, text_target=tgt_text, padding=True, return_tensors="pt")
    input_ids, attention_mask, labels = enc["input_ids"], enc["attention_mask"], enc["labels"]
    decoder_input_ids, decoder_attention_mask, out, out_sdpa, gen = batch_forward(
        model, out_dir, input_ids, attention_mask, labels, tok.get_lang_id("de"))
    with torch.no_grad():
        out_nomask = model(input_ids=input_ids, attention_mask=attention_mask,
                           decoder_input_ids=decoder_input_ids, use_cache=False)
    t = reference_tensors(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, labels, out, gen)
    # one metadata key: safetensors writes the metadata map in hash order, so two keys would make
    # the file bytes differ from run to run
    meta = {"about": f"made by python reference/hf_random.py {' '.join(sys.argv[1:])}; batch: lines "
                     f"{[i + 1 for i in BATCH_LINES]} of {BASE}/input.en -> input.de; "
                     "see tests/fixtures/hf/README.md"}
    save_file(t, os.path.join(out_dir, "reference.safetensors"), metadata=meta)

    pad_mask = decoder_attention_mask.bool()
    fairseq_diffs = fairseq_from_hf(out_dir, t, vocab_size)
    print("[random-m2m100 fairseq forward on the HF weights] " + json.dumps(fairseq_diffs), flush=True)
    tokens = {
        "source_text": src_text, "target_text": tgt_text,
        "input_ids": input_ids.tolist(), "labels": labels.tolist(),
        "source_pieces": [tok.convert_ids_to_tokens(r) for r in input_ids.tolist()],
        "language_token_ids": {l: tok.get_lang_id(l) for l in ("de", "en", "fr")},
        "madeup_word_ids": [len(vocab) + 100, vocab_size - 1],
    }
    tensors = {}
    for k, v in t.items():
        tensors[k] = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
    notes = {
        "input_ids": "[B,S] M2M100Tokenizer(src_lang='en')(text, padding=True): [__en__] + pieces + [</s>], RIGHT-padded with <pad>=1",
        "attention_mask": "[B,S] 1 = token, 0 = padding",
        "labels": "[B,T] tokenizer(text_target=..., tgt_lang='de'): [__de__] + pieces + [</s>], right-padded with 1",
        "decoder_input_ids": "[B,T] shift_tokens_right(labels, 1, 2): [</s>, __de__, pieces..., (</s> on shorter rows)] (fairseq prev_output_tokens)",
        "decoder_attention_mask": "[B,T] decoder_input_ids != pad (fairseq masks padded decoder keys the same way)",
        "encoder_hidden_states.0": "[B,S,C] scaled token embedding + sinusoidal position (fairseq encoder_states[0] / encoder_embedding+pos, before any layer)",
        "encoder_hidden_states.1": "[B,S,C] output of encoder layer 1 (fairseq encoder_states[1]; pre-norm: no LayerNorm applied to it)",
        "encoder_hidden_states.2": "[B,S,C] output of the LAST encoder layer AFTER the final encoder LayerNorm (= encoder_last_hidden_state = fairseq encoder_out; fairseq's own encoder_states[2] is BEFORE that LayerNorm)",
        "encoder_last_hidden_state": "[B,S,C] = encoder_hidden_states.2 (fairseq encoder_out['encoder_out'][0].transpose(0,1))",
        "decoder_hidden_states.0": "[B,T,C] scaled embedding + position (fairseq inner_states[0])",
        "decoder_hidden_states.1": "[B,T,C] output of decoder layer 1 (fairseq inner_states[1])",
        "decoder_hidden_states.2": "[B,T,C] last decoder layer AFTER the final decoder LayerNorm (fairseq: layer_norm(inner_states[2]), the features fed to the output projection)",
        "logits": "[B,T,V] lm_head (tied to model.shared) of decoder_hidden_states.2, with decoder_attention_mask",
        "generate_beam5_sequences": "[B,L] model.generate(input_ids, attention_mask, forced_bos_token_id=__de__, num_beams=5, max_length=40) with generation_config.json (early_stopping, forced_eos): [2, __de__, ..., </s>, pad...]",
        "generate_beam5_sequences_scores": "[B] generate's normalized beam scores (sum of log-probs after the decoder start, the forced __de__ counted as 0, / generated length)",
    }
    diffs = {
        "eager_vs_sdpa_logits_max_abs": float((out.logits - out_sdpa.logits).abs().max()),
        # without decoder_attention_mask (transformers' default when labels are given) only rows at
        # padded decoder positions change
        "mask_vs_nomask_logits_max_abs_non_pad": float((out.logits - out_nomask.logits).abs()[pad_mask].max()),
        "mask_vs_nomask_logits_max_abs_all": float((out.logits - out_nomask.logits).abs().max()),
    }
    sec = {
        "dir": out_dir,
        "argv": ["python", "reference/hf_random.py"] + sys.argv[1:],
        "seed": SEED,
        "config": {k: v for k, v in config.to_dict().items() if k in (
            "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function",
            "scale_embedding", "max_position_embeddings", "init_std", "tie_word_embeddings")},
        "reference_file": os.path.join(out_dir, "reference.safetensors"),
        "reference_computed_with": "M2M100ForConditionalGeneration.from_pretrained(dir, attn_implementation='eager'), eval, float32, torch.no_grad(), use_cache=False",
        "tensors": {k: {**tensors[k], "what": notes[k]} for k in t},
        "tokens": tokens,
        "checks": diffs,
        "fairseq_forward_on_hf_weights": {
            "what": "fairseq 0.12.2 TransformerModel (transformer arch, pre-norm, shared embeddings, 32/64, 2+2 layers, 4 heads) loaded with the HF weights under fairseq names (model.shared.weight -> encoder/decoder.embed_tokens + decoder.output_projection; model.X -> X); fairseq forward on input_ids / decoder_input_ids; max abs diff vs the reference tensors over non-pad positions",
            "max_abs_diff": fairseq_diffs,
        },
        "generate_beam5_text": tok.batch_decode(gen.sequences, skip_special_tokens=True),
    }
    write_section(manifest, "random_m2m100", sec)
    print(json.dumps({"dir": out_dir, "checks": diffs, "shapes": {k: v["shape"] for k, v in tensors.items()}}))


if __name__ == "__main__":
    main()
