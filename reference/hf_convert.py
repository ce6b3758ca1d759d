#!/usr/bin/env python3
"""Convert fairseq 0.12.2 fixtures into Hugging Face transformers model directories.

Usage (from the repository root, inside `source reference/env.sh`, transformers installed from
reference/requirements-hf.txt, HF_HUB_OFFLINE=1):

  python reference/hf_convert.py m2m  tests/fixtures/multilingual/m2m  tests/fixtures/hf/m2m
  python reference/hf_convert.py fsmt tests/fixtures/models/postnorm   tests/fixtures/hf/fsmt-postnorm
  python reference/hf_convert.py fsmt weights/multi30k.en-de OUT --langs en de --bpecodes weights/multi30k.en-de/bpecodes

The key mapping is ours (tests/fixtures/hf/README.md has the full table); it reads the raw
checkpoint (`torch.load`, the `model` state dict and `cfg.model`), never fairseq's upgraded
model, so it is exactly what a loader of the raw file has to do. Every key of the checkpoint is
either mapped or dropped for a stated reason; anything else is an error. The model is then
built by transformers from the config we write, loaded with the mapped tensors (strict: no
missing, no unexpected key), and written with `save_pretrained` (safetensors).

  m2m  -> M2M100ForConditionalGeneration (pre-norm, final encoder/decoder LayerNorm,
          sinusoidal positions, shared embeddings). Files: config.json,
          generation_config.json, model.safetensors, sentencepiece.bpe.model, vocab.json,
          tokenizer_config.json, special_tokens_map.json.
  fsmt -> FSMTForConditionalGeneration (post-norm, sinusoidal, decoder input = output
          embedding). Files: config.json, generation_config.json, model.safetensors,
          vocab-src.json, vocab-tgt.json, merges.txt, tokenizer_config.json.

A JSON summary (mapped / dropped keys, config) is printed on the last stdout line.
"""
import argparse
import json
import os
import re
import shutil
import sys

import torch

# ---------------------------------------------------------------------------------------------
# reading the fairseq side


def load_checkpoint(path):
    """The raw checkpoint: (state dict, model config Namespace). fairseq 0.12.2 checkpoints keep
    the config in cfg['model'] (a Namespace for argparse-registered archs); older ones in args."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    args = ck.get("args")
    if args is None:
        args = ck["cfg"]["model"]
    return ck["model"], args


def read_fairseq_dict(path, nspecial_first=("<s>", "<pad>", "</s>", "<unk>")):
    """fairseq Dictionary.load order: the 4 specials (bos=0, pad=1, eos=2, unk=3), then the
    file's lines in order (`symbol count [#fairseq:overwrite]`)."""
    syms = list(nspecial_first)
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.rsplit(" ", 1)
            sym = parts[0]
            if sym.endswith(" #fairseq:overwrite"):
                sym = sym[: -len(" #fairseq:overwrite")]
            syms.append(sym)
    return syms


def getopt(args, name, default=None):
    return getattr(args, name, default)


# keys every 0.12.2 checkpoint may carry that no HF model has
def _dropped_reason(key):
    if key in ("encoder.version", "decoder.version"):
        return "fairseq upgrade marker"
    if key.endswith("embed_positions._float_tensor"):
        return "sinusoidal placeholder buffer (table recomputed by both sides)"
    if re.fullmatch(r"encoder\.layers\.\d+\.(in_proj_weight|in_proj_bias|out_proj_weight|out_proj_bias|"
                    r"fc1_weight|fc1_bias|fc2_weight|fc2_bias)", key):
        return "0.12.2 encoder fast-path copy (saved as zeros; never use)"
    return None


def _check_tied(sd, names):
    base = sd[names[0]]
    for n in names[1:]:
        if n in sd and not torch.equal(sd[n], base):
            raise SystemExit(f"{n} differs from {names[0]} although the config says they are shared")


LAYER_RE = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.(.+)")
LAYER_PARAMS = {
    "encoder": [
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
        "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm",
    ],
    "decoder": [
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
        "self_attn_layer_norm",
        "encoder_attn.q_proj", "encoder_attn.k_proj", "encoder_attn.v_proj", "encoder_attn.out_proj",
        "encoder_attn_layer_norm", "fc1", "fc2", "final_layer_norm",
    ],
}


def map_state_dict(sd, prefix, embed_map, final_ln):
    """fairseq raw state dict -> HF state dict. Layer parameters keep their names below
    `<prefix>encoder.` / `<prefix>decoder.` (fairseq and both HF models use the same module
    names inside a layer). `embed_map`: fairseq key -> list of HF keys (the embeddings and output
    projection, model specific). `final_ln`: whether encoder/decoder.layer_norm exist.
    Returns (hf_sd, mapping list [(fairseq, hf)], dropped {key: reason})."""
    out, mapping, dropped = {}, [], {}
    for k, v in sd.items():
        why = _dropped_reason(k)
        if why:
            dropped[k] = why
            continue
        if k in embed_map:
            targets = embed_map[k]
            if not targets:
                dropped[k] = "tied: same tensor as the shared embedding (checked equal)"
            for t in targets:
                out[t] = v.detach().clone().float() if v.dtype != torch.float32 else v.detach().clone()
                mapping.append((k, t))
            continue
        m = LAYER_RE.fullmatch(k)
        if m:
            side, idx, rest = m.groups()
            mod, _, leaf = rest.rpartition(".")
            if mod not in LAYER_PARAMS[side] or leaf not in ("weight", "bias"):
                raise SystemExit(f"unexpected layer key {k}")
            t = f"{prefix}{side}.layers.{idx}.{rest}"
            out[t] = v.detach().clone().float()
            mapping.append((k, t))
            continue
        if final_ln and re.fullmatch(r"(encoder|decoder)\.layer_norm\.(weight|bias)", k):
            t = prefix + k
            out[t] = v.detach().clone().float()
            mapping.append((k, t))
            continue
        raise SystemExit(f"no mapping for checkpoint key {k} {tuple(v.shape)}")
    return out, mapping, dropped


def load_strict(model, hf_sd, allow_missing=()):
    """load_state_dict and fail on anything unexpected or missing (except the listed keys,
    which transformers fills itself: recomputed sinusoidal tables, tied copies)."""
    res = model.load_state_dict(hf_sd, strict=False)
    missing = [k for k in res.missing_keys if k not in allow_missing]
    if missing or res.unexpected_keys:
        raise SystemExit(f"missing {missing} unexpected {res.unexpected_keys}")
    return res


# ---------------------------------------------------------------------------------------------
# M2M-100


def convert_m2m(src_dir, out_dir, checkpoint="model.pt"):
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    sd, a = load_checkpoint(os.path.join(src_dir, checkpoint))
    # what M2M100ForConditionalGeneration can represent
    need = {
        "encoder_normalize_before": True, "decoder_normalize_before": True,
        "encoder_learned_pos": False, "decoder_learned_pos": False,
        "layernorm_embedding": False, "share_all_embeddings": True,
        "no_token_positional_embeddings": False, "adaptive_softmax_cutoff": None,
        "cross_self_attention": False, "no_decoder_final_norm": False,
    }
    for k, v in need.items():
        have = getopt(a, k, v)
        if have != v:
            raise SystemExit(f"M2M100 cannot represent {k}={have!r} (needs {v!r})")
    if a.encoder_embed_dim != a.decoder_embed_dim:
        raise SystemExit("M2M100 has one d_model")
    if getopt(a, "decoder_output_dim", a.decoder_embed_dim) != a.decoder_embed_dim or \
            getopt(a, "decoder_input_dim", a.decoder_embed_dim) != a.decoder_embed_dim:
        raise SystemExit("M2M100 has no project_in/out")
    if getopt(a, "activation_fn", "relu") not in ("relu", "gelu"):
        raise SystemExit(f"activation {a.activation_fn}: no exact HF equivalent checked")

    emb_key = "encoder.embed_tokens.weight"
    _check_tied(sd, [emb_key, "decoder.embed_tokens.weight", "decoder.output_projection.weight"])
    vocab_size = sd[emb_key].shape[0]
    embed_map = {
        emb_key: ["model.shared.weight", "model.encoder.embed_tokens.weight",
                  "model.decoder.embed_tokens.weight", "lm_head.weight"],
        "decoder.embed_tokens.weight": [],
        "decoder.output_projection.weight": [],
    }
    hf_sd, mapping, dropped = map_state_dict(sd, "model.", embed_map, final_ln=True)

    # fairseq gelu = x * 0.5 * (1 + erf(x / sqrt 2)) = HF "gelu" (exact); relu = relu
    config = M2M100Config(
        vocab_size=vocab_size,
        max_position_embeddings=a.max_source_positions,
        encoder_layers=a.encoder_layers,
        decoder_layers=a.decoder_layers,
        encoder_attention_heads=a.encoder_attention_heads,
        decoder_attention_heads=a.decoder_attention_heads,
        encoder_ffn_dim=a.encoder_ffn_embed_dim,
        decoder_ffn_dim=a.decoder_ffn_embed_dim,
        d_model=a.encoder_embed_dim,
        encoder_layerdrop=getopt(a, "encoder_layerdrop", 0.0),
        decoder_layerdrop=getopt(a, "decoder_layerdrop", 0.0),
        dropout=a.dropout,
        attention_dropout=a.attention_dropout,
        activation_dropout=a.activation_dropout,
        activation_function=getopt(a, "activation_fn", "relu"),
        scale_embedding=not getopt(a, "no_scale_embedding", False),
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        tie_word_embeddings=True,
        architectures=["M2M100ForConditionalGeneration"],
    )
    if a.max_target_positions != a.max_source_positions:
        raise SystemExit("M2M100 has one max_position_embeddings")
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config).eval()
    load_strict(model, hf_sd)
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()
    # fairseq's default generation (beam 5, max_len_b 200 -> at most 200 tokens + </s> after the
    # decoder start token, lenpen 1, stop when 5 hypotheses are finished, <pad> never generated)
    # as far as generate() can express it; tests/fixtures/hf/README.md lists what remains different
    model.generation_config = GenerationConfig(
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=2, num_beams=5, early_stopping=True, length_penalty=1.0,
        max_length=202, min_new_tokens=1, suppress_tokens=[1],
    )
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)

    # tokenizer: the fairseq dictionary as vocab.json (every id the model has, language tokens
    # included, see README: M2M100Tokenizer computes its own language-token ids) + the spm model
    syms = read_fairseq_dict(os.path.join(src_dir, "model_dict.txt"))
    langs = [l.strip() for l in open(os.path.join(src_dir, "lang_list.txt"), encoding="utf-8") if l.strip()]
    syms += [f"__{l}__" for l in langs]  # augment_dictionary, style "multilingual", lang_list order
    if len(syms) != vocab_size:
        raise SystemExit(f"dictionary {len(syms)} != embedding rows {vocab_size}")
    vocab = {s: i for i, s in enumerate(syms)}
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    shutil.copyfile(os.path.join(src_dir, "sentencepiece.bpe.model"),
                    os.path.join(out_dir, "sentencepiece.bpe.model"))
    from transformers import M2M100Tokenizer

    tok = M2M100Tokenizer(
        vocab_file=os.path.join(out_dir, "vocab.json"),
        spm_file=os.path.join(out_dir, "sentencepiece.bpe.model"),
        language_codes="m2m100", model_max_length=1024, src_lang="en", tgt_lang="de",
    )
    tok.save_pretrained(out_dir)
    # save_pretrained rewrites vocab.json with its own formatting; keep ours (same content)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    return summary(out_dir, mapping, dropped, config, extra={
        "vocab_size": vocab_size, "fairseq_language_tokens": {f"__{l}__": vocab[f"__{l}__"] for l in langs},
    })


# ---------------------------------------------------------------------------------------------
# FSMT


def fsmt_vocab(syms):
    """transformers' FSMT convention (its conversion script's rewrite_dict_keys): a fairseq BPE
    symbol ending in `@@` loses it, every other symbol gets `</w>`, the 4 specials stay as they
    are. Ids are the fairseq ids."""
    out = {}
    for i, s in enumerate(syms):
        if i < 4:
            out[s] = i
        elif s.endswith("@@"):
            out[s[:-2]] = i
        else:
            out[s + "</w>"] = i
    if len(out) != len(syms):
        raise SystemExit("vocabulary collision after the @@ / </w> rewrite")
    return out


def convert_fsmt(src_dir, out_dir, langs=("src", "tgt"), checkpoint="model.pt", bpecodes=None):
    from transformers import FSMTConfig, FSMTForConditionalGeneration, GenerationConfig

    sd, a = load_checkpoint(os.path.join(src_dir, checkpoint))
    need = {
        "encoder_normalize_before": False, "decoder_normalize_before": False,
        "encoder_learned_pos": False, "decoder_learned_pos": False,
        "layernorm_embedding": False, "no_token_positional_embeddings": False,
        "adaptive_softmax_cutoff": None, "cross_self_attention": False,
        # FSMT's decoder always ties its input embedding to the output projection
        "share_decoder_input_output_embed": True,
    }
    for k, v in need.items():
        have = getopt(a, k, v)
        if k == "share_decoder_input_output_embed" and getopt(a, "share_all_embeddings", False):
            have = True
        if have != v:
            raise SystemExit(f"FSMT cannot represent {k}={have!r} (needs {v!r})")
    if a.encoder_embed_dim != a.decoder_embed_dim:
        raise SystemExit("FSMT has one d_model")
    if getopt(a, "activation_fn", "relu") not in ("relu", "gelu"):
        raise SystemExit(f"activation {a.activation_fn}: no exact HF equivalent checked")
    shared_all = bool(getopt(a, "share_all_embeddings", False))
    if "decoder.output_projection.weight" in sd:
        _check_tied(sd, ["decoder.embed_tokens.weight", "decoder.output_projection.weight"])
    if shared_all:
        _check_tied(sd, ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"])
    embed_map = {
        "encoder.embed_tokens.weight": ["model.encoder.embed_tokens.weight"],
        "decoder.embed_tokens.weight": ["model.decoder.embed_tokens.weight",
                                        "model.decoder.output_projection.weight"],
        "decoder.output_projection.weight": [],
    }
    hf_sd, mapping, dropped = map_state_dict(sd, "model.", embed_map, final_ln=False)
    src_syms = read_fairseq_dict(os.path.join(src_dir, f"dict.{langs[0]}.txt"))
    tgt_syms = read_fairseq_dict(os.path.join(src_dir, f"dict.{langs[1]}.txt"))
    assert len(src_syms) == sd["encoder.embed_tokens.weight"].shape[0]
    assert len(tgt_syms) == sd["decoder.embed_tokens.weight"].shape[0]
    config = FSMTConfig(
        langs=list(langs),
        src_vocab_size=len(src_syms),
        tgt_vocab_size=len(tgt_syms),
        activation_function=getopt(a, "activation_fn", "relu"),
        d_model=a.encoder_embed_dim,
        max_position_embeddings=a.max_source_positions,
        encoder_ffn_dim=a.encoder_ffn_embed_dim,
        encoder_layers=a.encoder_layers,
        encoder_attention_heads=a.encoder_attention_heads,
        encoder_layerdrop=getopt(a, "encoder_layerdrop", 0.0),
        decoder_ffn_dim=a.decoder_ffn_embed_dim,
        decoder_layers=a.decoder_layers,
        decoder_attention_heads=a.decoder_attention_heads,
        decoder_layerdrop=getopt(a, "decoder_layerdrop", 0.0),
        attention_dropout=a.attention_dropout,
        dropout=a.dropout,
        activation_dropout=a.activation_dropout,
        scale_embedding=not getopt(a, "no_scale_embedding", False),
        tie_word_embeddings=shared_all,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=2, num_beams=5, early_stopping=True, length_penalty=1.0,
        architectures=["FSMTForConditionalGeneration"],
    )
    if a.max_target_positions != a.max_source_positions:
        raise SystemExit("FSMT has one max_position_embeddings")
    torch.manual_seed(0)
    model = FSMTForConditionalGeneration(config).eval()
    # the sinusoidal tables are FSMT parameters that transformers computes itself
    load_strict(model, hf_sd, allow_missing=("model.encoder.embed_positions.weight",
                                             "model.decoder.embed_positions.weight"))
    model.tie_weights()
    dec = model.model.decoder
    assert dec.output_projection.weight.data_ptr() == dec.embed_tokens.weight.data_ptr()
    model.generation_config = GenerationConfig(
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=2, num_beams=5, early_stopping=True, length_penalty=1.0,
        max_length=202, min_new_tokens=1, suppress_tokens=[1],
    )
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)

    src_vocab, tgt_vocab = fsmt_vocab(src_syms), fsmt_vocab(tgt_syms)
    for name, v in (("vocab-src.json", src_vocab), ("vocab-tgt.json", tgt_vocab)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(v, f, ensure_ascii=False, indent=2)
    merges_path = os.path.join(out_dir, "merges.txt")
    if bpecodes:
        # subword-nmt / fastBPE codes: `left right[ count]` per line; FSMTTokenizer reads the first
        # two fields of every line but the last (so the file must end with a newline) and treats
        # a `#version: 0.2` header as one (harmless) merge; drop it and any counts
        lines = []
        for line in open(bpecodes, encoding="utf-8"):
            if line.startswith("#version"):
                continue
            parts = line.split()
            if len(parts) >= 2:
                lines.append(f"{parts[0]} {parts[1]}")
        merges = "\n".join(lines) + "\n"
    else:
        # the synthetic task has no BPE: every symbol is one character (no merge needed; FSMT
        # appends </w> to a one-character word); see README for the out-of-vocabulary case
        merges = ""
    with open(merges_path, "w", encoding="utf-8") as f:
        f.write(merges)
    do_lower_case = all(k.islower() for k in src_vocab)  # the conversion script's rule
    tok_conf = {"langs": list(langs), "model_max_length": 1024, "do_lower_case": do_lower_case,
                "tokenizer_class": "FSMTTokenizer"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tok_conf, f, ensure_ascii=False, indent=2)
        f.write("\n")
    return summary(out_dir, mapping, dropped, config, extra={
        "src_vocab_size": len(src_syms), "tgt_vocab_size": len(tgt_syms), "merges": merges.count("\n"),
    })


def summary(out_dir, mapping, dropped, config, extra):
    from safetensors import safe_open

    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        stored = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    return {
        "out_dir": out_dir,
        "mapped": [[a, b] for a, b in mapping],
        "dropped": dropped,
        "safetensors_keys": stored,
        "config": {k: v for k, v in config.to_dict().items() if not k.startswith("_")},
        **extra,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["m2m", "fsmt"])
    p.add_argument("src_dir")
    p.add_argument("out_dir")
    p.add_argument("--checkpoint", default="model.pt")
    p.add_argument("--langs", nargs=2, default=["src", "tgt"], help="fsmt: dict.<L>.txt names")
    p.add_argument("--bpecodes", help="fsmt: subword-nmt/fastBPE codes -> merges.txt")
    p.add_argument("--manifest", help="merge the summary into this JSON file under conversions.<out dir name>")
    args = p.parse_args()
    if os.path.isdir(args.out_dir):
        shutil.rmtree(args.out_dir)
    if args.kind == "m2m":
        s = convert_m2m(args.src_dir, args.out_dir, args.checkpoint)
    else:
        s = convert_fsmt(args.src_dir, args.out_dir, tuple(args.langs), args.checkpoint, args.bpecodes)
    s["argv"] = ["python", "reference/hf_convert.py"] + sys.argv[1:]
    if args.manifest:
        try:
            m = json.load(open(args.manifest))
        except FileNotFoundError:
            m = {}
        m.setdefault("conversions", {})[os.path.basename(args.out_dir.rstrip("/"))] = s
        with open(args.manifest, "w") as f:
            json.dump(m, f, indent=1, ensure_ascii=False)
            f.write("\n")
    print(json.dumps({k: s[k] for k in ("out_dir", "dropped")}))


if __name__ == "__main__":
    main()
