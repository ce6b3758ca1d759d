#!/usr/bin/env python3
"""Which `config.json` (and `generation_config.json`) fields of a Hugging Face conversion change
what transformers computes:
each candidate plant (one field of a faithful fixture set to another value) is loaded with
transformers' own class and run on the fixture's inputs; the golden records, per plant, the
largest |logit| difference from the faithful directory (teacher-forced on the faithful model's
own translations) and how many of generate()'s best translations changed, or the error
transformers raises. A candidate that changes neither is no plant: the golden says so and why.
`tests/it/against.rs` plants exactly the fields proven here into the fixture and expects
`tchseq verify --against` to fail naming each.

Usage (repository root, the venv of reference/requirements-hf.txt, `source reference/env.sh`,
HF_HUB_OFFLINE=1):
  python reference/hf_plants.py tests/fixtures/hf/plants.json
"""
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import warnings

import torch
import transformers
from transformers import AutoTokenizer, FSMTForConditionalGeneration, M2M100ForConditionalGeneration
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
warnings.filterwarnings("ignore")
torch.manual_seed(0)

FIXTURES = {
    # fixture dir, class, input lines, generate() keywords beyond generation_config.json's
    "m2m": ("tests/fixtures/hf/m2m", M2M100ForConditionalGeneration, "tests/fixtures/multilingual/input.en", "m2m"),
    "fsmt-postnorm": ("tests/fixtures/hf/fsmt-postnorm", FSMTForConditionalGeneration, "tests/fixtures/models/inputs.src", "fsmt"),
}

# (fixture, field, planted value); every field of the two classes' configs that a converter
# writes or transformers reads, each set to a value a wrong conversion could carry
BOTH = [
    ("activation_function", "gelu"),
    ("d_model", 48),
    ("encoder_layers", 1),
    ("decoder_layers", 1),
    ("encoder_attention_heads", 2),
    ("decoder_attention_heads", 2),
    ("encoder_ffn_dim", 96),
    ("decoder_ffn_dim", 96),
    ("scale_embedding", False),
    ("max_position_embeddings", 8),
    ("pad_token_id", 0),
    ("bos_token_id", 3),
    ("eos_token_id", 3),
    ("decoder_start_token_id", 0),
    ("forced_bos_token_id", 5),
    ("forced_eos_token_id", 3),
    ("hidden_size", 48),
    ("num_attention_heads", 2),
    ("num_hidden_layers", 1),
    ("is_encoder_decoder", False),
    ("tie_encoder_decoder", True),
    ("pruned_heads", {"0": [0]}),
    ("is_decoder", True),
    ("dropout", 0.5),
    ("attention_dropout", 0.5),
    ("activation_dropout", 0.5),
    ("encoder_layerdrop", 0.5),
    ("decoder_layerdrop", 0.5),
    ("init_std", 0.5),
    ("use_cache", False),
    ("num_beams", 1),
    ("max_length", 3),
    ("dtype", "float16"),
    ("normalize_before", False),
    ("layernorm_embedding", True),
]
# generation_config.json: the token ids generate() reads (its decoding options, num_beams,
# max_length, ..., are tchseq's command line's, not the model's)
GENERATION = [
    ("bos_token_id", 3),
    ("eos_token_id", 3),
    ("pad_token_id", 0),
    ("decoder_start_token_id", 0),
    ("forced_bos_token_id", 5),
    ("forced_eos_token_id", 3),
    ("suppress_tokens", []),
]
# config.json in a directory without generation_config.json: generate() then takes its token
# ids and decoding options from config.json (GenerationConfig.from_model_config)
WITHOUT_GENERATION = [
    ("bos_token_id", 3),
    ("eos_token_id", 3),
    ("pad_token_id", 0),
    ("decoder_start_token_id", 0),
    ("forced_bos_token_id", 5),
    ("forced_eos_token_id", 3),
    ("suppress_tokens", [5]),
    ("begin_suppress_tokens", [5]),
    ("forced_decoder_ids", [[1, 5]]),
    ("bad_words_ids", [[5]]),
]
CANDIDATES = (
    [("m2m", f, v) for f, v in BOTH]
    + [("m2m", "vocab_size", 4000), ("m2m", "tie_word_embeddings", False)]
    + [("fsmt-postnorm", f, v) for f, v in BOTH]
    + [(fx, "generation_config.json:" + f, v) for fx in ("m2m", "fsmt-postnorm") for f, v in GENERATION]
    + [
        ("fsmt-postnorm", "src_vocab_size", 40),
        ("fsmt-postnorm", "tgt_vocab_size", 40),
        ("fsmt-postnorm", "tie_word_embeddings", False),
        ("fsmt-postnorm", "langs", ["de", "en"]),
        ("fsmt-postnorm", "vocab_size", 40),
    ]
)

# why a candidate changes nothing, by field (checked: the golden records only measured outcomes)
WHY_INERT = {
    "dropout": "read only in training (eval() turns every dropout off)",
    "attention_dropout": "read only in training",
    "activation_dropout": "read only in training",
    "encoder_layerdrop": "LayerDrop skips layers only in training",
    "decoder_layerdrop": "LayerDrop skips layers only in training",
    "init_std": "initialises only weights the file does not hold; a faithful file holds all",
    "use_cache": "the key/value cache changes speed, not values",
    "max_position_embeddings": "the sinusoidal table grows to any length it is asked for (M2M100SinusoidalPositionalEmbedding / SinusoidalPositionalEmbedding make_weights)",
    "bos_token_id": "an encoder-decoder model's generate() starts from decoder_start_token_id; with generation_config.json beside it, generate() reads its token ids there",
    "eos_token_id": "generate() reads it from generation_config.json, which is beside config.json",
    "decoder_start_token_id": "generate() reads it from generation_config.json; the forward reads it only to shift labels",
    "forced_bos_token_id": "generate() reads it from generation_config.json (and M2M-100 is given the target language's id)",
    "forced_eos_token_id": "generate() reads it from generation_config.json",
    "num_beams": "a generation option: generate() reads generation_config.json",
    "max_length": "a generation option: generate() reads generation_config.json",
    "num_hidden_layers": "no alias of either side's layers in these classes' attribute_map; the configs set it from encoder_layers",
    "is_decoder": "these classes never read it",
    "tie_encoder_decoder": "ties only models whose encoder and decoder share a base_model_prefix module (EncoderDecoderModel)",
    "dtype": "from_pretrained loads float32 unless asked for dtype=\"auto\"",
    "normalize_before": "not a field of either class: transformers keeps it as an attribute and never reads it (M2M-100 is always pre-norm, FSMT always post-norm)",
    "layernorm_embedding": "not a field of either class: never read",
    "generation_config.json:forced_bos_token_id": "M2M-100's generate() is given the target language's id, which overrides it",
    "generation_config.json:bos_token_id": "an encoder-decoder model's generate() starts from decoder_start_token_id",
    "generation_config.json:pad_token_id": "pads only finished beams, whose scores no longer change",
    "generation_config.json:forced_eos_token_id": "forces </s> only at max_length, which these translations end before",
    "generation_config.json:suppress_tokens": "suppresses <pad>, which no hypothesis of these models reaches",
    "without generation_config.json:bos_token_id": "an encoder-decoder model's generate() starts from decoder_start_token_id",
    "without generation_config.json:pad_token_id": "pads only finished hypotheses (greedy search here: config.json sets no num_beams)",
    "without generation_config.json:forced_bos_token_id": "M2M-100's generate() is given the target language's id, which overrides it",
    "without generation_config.json:forced_eos_token_id": "forces </s> only at max_length, which these translations end before",
    "without generation_config.json:begin_suppress_tokens": "suppresses its tokens at the first generated position only, where these translations do not choose them",
    "without generation_config.json:suppress_tokens": "suppresses a token these translations do not choose",
    "without generation_config.json:forced_decoder_ids": "measured: transformers 4.57.6's generate() applies no forced_decoder_ids to these models",
    "without generation_config.json:bad_words_ids": "bans a token these translations do not choose",
    "langs": "read by FSMTTokenizer from tokenizer_config.json, not by the model",
    "vocab_size": "FSMT reads src_vocab_size / tgt_vocab_size; vocab_size only in the training loss",
}


def lines(path, n=4):
    with open(path, encoding="utf-8") as f:
        return [l.strip() for l in f if l.strip()][:n]


def run(kind, cls, hf_dir, inputs, tokens=None):
    """transformers' logits (teacher-forced on `tokens`, else on its own generate() output) and
    generate()'s best translations, or the error it raises."""
    model = cls.from_pretrained(hf_dir).eval()
    tok = AutoTokenizer.from_pretrained(hf_dir)
    kw = {}
    batch = tok(inputs, return_tensors="pt", padding=True)
    if kind == "m2m":
        # the language tokens at the ids vocab.json gives them (fairseq's): M2M100Tokenizer places
        # its own language table after the vocabulary instead
        with open(os.path.join(hf_dir, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        batch["input_ids"][:, 0] = vocab["__en__"]
        kw["forced_bos_token_id"] = vocab["__de__"]
    with torch.no_grad():
        out = model.generate(**batch, **kw)
        decoder_input_ids = tokens if tokens is not None else out
        logits = model(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
    return logits, out.tolist(), decoder_input_ids


def measure(kind, cls, base_dir, inputs, field, value, base):
    base_logits, base_out, tokens = base
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "hf")
        shutil.copytree(base_dir, d)
        file, field = field.split(":") if ":" in field else ("config.json", field)
        with open(os.path.join(d, file), encoding="utf-8") as f:
            config = json.load(f)
        config[field] = copy.deepcopy(value)
        with open(os.path.join(d, file), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        try:
            logits, out, _ = run(kind, cls, d, inputs, tokens)
        except Exception as e:  # what transformers raises is the outcome
            return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    res = {}
    if logits.shape == base_logits.shape:
        res["max_abs_logit_diff"] = float((logits - base_logits).abs().max())
    else:
        res["logits_shape"] = list(logits.shape)
    changed = sum(1 for a, b in zip(out, base_out) if a != b) + abs(len(out) - len(base_out))
    res["generate_changed"] = changed
    return res


def main(golden):
    plants, inert = [], []
    tmp = tempfile.TemporaryDirectory()
    for fixture, (hf_dir, cls, input_file, kind) in FIXTURES.items():
        inputs = lines(input_file)
        bare = os.path.join(tmp.name, fixture)
        shutil.copytree(hf_dir, bare)
        os.remove(os.path.join(bare, "generation_config.json"))
        candidates = [(f, v, hf_dir, None) for fx, f, v in CANDIDATES if fx == fixture]
        candidates += [(f, v, bare, "generation_config.json") for f, v in WITHOUT_GENERATION]
        bases = {}
        for field, value, base_dir, removed in candidates:
            if base_dir not in bases:
                bases[base_dir] = run(kind, cls, base_dir, inputs)
            r = measure(kind, cls, base_dir, inputs, field, value, bases[base_dir])
            file, name = field.split(":") if ":" in field else ("config.json", field)
            row = {"fixture": fixture, "file": file, "field": name, "value": value, **r}
            if removed:
                row = {"fixture": fixture, "removed": removed, **{k: v for k, v in row.items() if k != "fixture"}}
                field = "without generation_config.json:" + field
            changes = "error" in r or "logits_shape" in r or r.get("max_abs_logit_diff", 0.0) > 0.0 or r.get("generate_changed", 0) > 0
            if changes:
                plants.append(row)
            else:
                row["why"] = WHY_INERT.get(field, WHY_INERT.get(name, "(no reason recorded)"))
                inert.append(row)
            print(f"{fixture} {field}={json.dumps(value)}: {'PLANT' if changes else 'inert'} {r}", file=sys.stderr)
    tmp.cleanup()
    doc = {
        "made_by": "python reference/hf_plants.py " + golden,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
        "how": "each plant: the fixture copied, one config.json field set to `value`, loaded by the fixture's class "
               "(from_pretrained, eval, float32), generate() with generation_config.json (M2M-100: forced_bos_token_id "
               "= vocab.json's __de__, the source's first token vocab.json's __en__) on the first 4 input lines, logits teacher-forced on the faithful "
               "directory's own generate() output; max_abs_logit_diff and generate_changed against the faithful "
               "directory, or the error transformers raises; a plant with `removed` is made in (and measured against) "
               "the fixture without that file",
        "plants": plants,
        "not_plants": inert,
    }
    with open(golden, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{len(plants)} plants, {len(inert)} inert candidates -> {golden}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
