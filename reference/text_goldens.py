"""Ground truth for tchseq's text pipeline, written by the Python tools fairseq 0.12.2 uses.

Run through reference/text_goldens.sh (which sources reference/env.sh). Writes
tests/fixtures/text/:

  stress.json                   hand-written hard cases (one per line, JSON-escaped in goldens)
  moses.{en,de,fr}.json         sacremoses 0.1.1 tokenize (4 flag settings) + detokenize
  bpecodes                      subword-nmt 0.3.8 codes (#version: 0.2) learned on Multi30k train
  bpecodes.v01                  the same merges without the header (read as version 0.1)
  bpecodes.fastbpe              the same merges as fastBPE `a b count` lines
  bpe.json                      apply + removal for each codes file
  spm/{bpe,unigram}.model       tiny sentencepiece models trained on Multi30k train.en
  spm/knnseq-{en,ja}.model      copies of /work/shared/wild/knnseq-toy-en-ja/spm/*.model
  spm.json                      sentencepiece 0.2.1 Encode(out_type=str) + fairseq decode
  pipeline.json                 fairseq's encoders chained as the hub does: encode, decode
  dict.knnseq.en.txt, ids.json  fairseq Dictionary.encode_line / string on spm-encoded text

Every string goes through fairseq's own encoder classes where fairseq has one.
"""

import argparse
import gzip
import io
import json
import os
import shutil
import sys
import tempfile
from argparse import Namespace

import sacremoses
import sentencepiece as spm
import torch
import subword_nmt
from subword_nmt import learn_bpe
from fairseq.data.encoders.moses_tokenizer import MosesTokenizer as FairseqMoses
from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE
from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE

SHARED = os.environ.get("TCHSEQ_SHARED", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
MULTI30K = os.path.join(SHARED, "data", "multi30k")
KNNSEQ_SPM = os.path.join(SHARED, "wild", "knnseq-toy-en-ja", "spm")
LANGS = ["en", "de", "fr"]
VAL_LINES = 500  # keeps the fixtures small; every rule fires many times in 500 lines
MOSES_VARIANTS = {
    # name: (escape, aggressive_dash_splits); "escape+dash" is fairseq's default
    "escape+dash": (True, True),
    "escape+nodash": (True, False),
    "noescape+dash": (False, True),
    "noescape+nodash": (False, False),
}

STRESS = [
    "",
    " ",
    "   leading and trailing   ",
    "tabs\tinside\t\tand  multiple   spaces",
    "Dr. Smith met Mr. Jones at 5 p.m. on Jan. 3.",
    "z.B. die Nr. 5 und S. 12, usw. Prof. Dr. Müller.",
    "M. Dupont et Mme. Durand, p. ex. à 10 h.",
    "No. 5 and No 5. and No. five. Art. 3 ff.",
    "He said: \"Hello\" and 'goodbye' and `back` ``ticks'' ‘single’ “double” „German“ «French» ‹x›.",
    "It's John's dog; they're, we've, I'd, can't, won't, y'all, '90s, rock 'n' roll.",
    "l'homme, aujourd'hui, qu'il, jusqu'à, d'accord.",
    "well-known state-of-the-art e-mail -- dash — em – en ‐ hyphen ‒ figure",
    "Wait... really.... no..... end...",
    "Numbers: 1,000,000 and 3.14159 and 1.000,50 € and $5.99 and 50% and 1/2 and 10:30.",
    "URL http://www.example.com/path/to/page.html?x=1&y=2#frag and https://a.b/c",
    "Mail me at john.doe@example.co.uk or @handle #hashtag.",
    "Brackets (round) [square] {curly} <angle> and | pipe & ampersand.",
    "A/B testing and/or either/or.",
    "End with period.",
    "End with quote.'",
    "End with a period in quotes.\"",
    "Question? Exclamation! Interrobang?! ¿Qué? ¡Hola!",
    "中文句子，还有标点。日本語の文です。한국어 문장입니다.",
    "Emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇩🇪 and ✓ ★ ♥ © ® ™ °C",
    "Control\x01chars\x07here\x1fand\x1cthere\x7f.",
    "Non\u00a0breaking\u2009thin\u3000ideographic\u200bzero-width",
    "Combining e\u0301 vs \u00e9 and Ａｂｃ fullwidth ① ﬁ ligature",
    "Supercalifragilisticexpialidocious" * 8,
    "x" * 300,
    "a",
    "a b c d e f g",
    "ÀÉÎÕÜ àéîõü ß ẞ Ææ Øø Åå Œœ Ççñ",
    "Greek Ελληνικά and Cyrillic Русский текст.",
    "Hebrew עברית and Arabic العربية.",
    "Devanagari हिन्दी क़",
    "&amp; already escaped &lt;tag&gt; &quot;q&quot; &apos;a&apos; &#124; &#91; &#93;",
    "@-@ @/@ DOTMULTI _ELLIPSIS_ THISISPROTECTED000",
    "A.B.C. U.S.A. e.g. i.e. etc.",
    "'Tis gonna be wanna gimme cannot lemme more'n 'twas d'ye gotta",
    "5'11\" tall, 90's, O'Neil, rock'n'roll",
    "The Jones' house and the boss' car.",
    "Line with trailing dot .",
    "...leading dots",
    ". . .",
    "'",
    "\"",
    "''",
    # sacremoses leaves spaces at the ends and inside for a lone closing quote after a period
    ".'",
    ":.'",
    "a :.' b",
    "--",
    "-",
    "@",
    "Mixed123numbers456and789letters a1-b2 3-4",
    "a,b,c 1,2,3 a, b, c 1 , 2",
    "Hello,world.How are you?Fine!",
    "¿¡ ¡¿ ¥100 £50 ₹20 ฿1",
    "Trailing comma,",
    "Price: 5,",
]

SPM_EXTRA = [
    "これは日本語のテストです。",
    "東京は日本の首都です",
    "カタカナとひらがな、そして漢字。",
    "ＡＢＣ１２３　全角スペース",
    "  many   spaces   inside  ",
    "\u2581 already has the meta symbol",
    "<s> </s> <unk> <pad>",
]


def read_gz(path, limit=None):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = []
        for line in f:
            lines.append(line.rstrip("\n"))
            if limit is not None and len(lines) >= limit:
                break
        return lines


def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=0)
        f.write("\n")


def moses_goldens(out):
    for lang in LANGS:
        inputs = read_gz(f"{MULTI30K}/val.{lang}.gz", VAL_LINES) + STRESS
        result = {"lang": lang, "sacremoses": sacremoses.__version__, "inputs": inputs, "tokenize": {}}
        tok = sacremoses.MosesTokenizer(lang)
        detok = sacremoses.MosesDetokenizer(lang)
        for name, (escape, dash) in MOSES_VARIANTS.items():
            # Through fairseq's wrapper for the variants fairseq can express.
            fs = FairseqMoses(Namespace(source_lang=lang, target_lang=lang,
                                        moses_no_dash_splits=not dash, moses_no_escape=not escape))
            outs = [fs.encode(x) for x in inputs]
            assert outs == [tok.tokenize(x, aggressive_dash_splits=dash, return_str=True, escape=escape) for x in inputs]
            result["tokenize"][name] = outs
        # fairseq decode = detokenize(x.split()); on the default tokenization and on raw text.
        fs = FairseqMoses(Namespace(source_lang=lang, target_lang=lang,
                                    moses_no_dash_splits=False, moses_no_escape=False))
        result["detokenize_tokenized"] = [fs.decode(x) for x in result["tokenize"]["escape+dash"]]
        result["detokenize_raw"] = [fs.decode(x) for x in inputs]
        assert result["detokenize_raw"] == [detok.detokenize(x.split()) for x in inputs]
        dump(os.path.join(out, f"moses.{lang}.json"), result)
    # One language sacremoses has no special rules or prefixes for, one with CJK classes.
    for lang in ["xx", "ja"]:
        inputs = STRESS + SPM_EXTRA
        tok = sacremoses.MosesTokenizer(lang)
        detok = sacremoses.MosesDetokenizer(lang)
        result = {"lang": lang, "sacremoses": sacremoses.__version__, "inputs": inputs, "tokenize": {}}
        for name, (escape, dash) in MOSES_VARIANTS.items():
            result["tokenize"][name] = [tok.tokenize(x, aggressive_dash_splits=dash, return_str=True, escape=escape) for x in inputs]
        result["detokenize_tokenized"] = [detok.detokenize(x.split()) for x in result["tokenize"]["escape+dash"]]
        result["detokenize_raw"] = [detok.detokenize(x.split()) for x in inputs]
        dump(os.path.join(out, f"moses.{lang}.json"), result)


def learn_codes(out):
    tok = {lang: sacremoses.MosesTokenizer(lang) for lang in ["en", "de"]}
    text = []
    for lang in ["en", "de"]:
        for line in read_gz(f"{MULTI30K}/train.{lang}.gz"):
            text.append(tok[lang].tokenize(line, aggressive_dash_splits=True, return_str=True, escape=True))
    codes = io.StringIO()
    log = io.StringIO()
    stderr, sys.stderr = sys.stderr, log
    try:
        learn_bpe.learn_bpe(io.StringIO("\n".join(text) + "\n"), codes, 8000, min_frequency=2, verbose=True)
    finally:
        sys.stderr = stderr
    codes_text = codes.getvalue()
    with open(os.path.join(out, "bpecodes"), "w", encoding="utf-8") as f:
        f.write(codes_text)
    lines = codes_text.rstrip("\n").split("\n")
    assert lines[0].startswith("#version: 0.2")
    with open(os.path.join(out, "bpecodes.v01"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines[1:]) + "\n")
    # learn_bpe --verbose logs "pair {i}: {a} {b} -> {ab} (frequency {n})" for each merge.
    # (tqdm's progress bar shares stderr, so find the entries instead of reading lines.)
    import re
    freqs = [int(m.group(2)) for m in re.finditer(r"pair (\d+): [^\n]*? \(frequency (\d+)\)\n", log.getvalue())]
    assert len(freqs) == len(lines) - 1, (len(freqs), len(lines))
    with open(os.path.join(out, "bpecodes.fastbpe"), "w", encoding="utf-8") as f:
        for pair, n in zip(lines[1:], freqs):
            f.write(f"{pair} {n}\n")


def fastbpe_apply(codes_path, lines):
    """fastBPE's own Python binding when it is importable, else None."""
    try:
        import fastBPE  # noqa: F401
    except ImportError:
        return None
    bpe = fastBPE.fastBPE(codes_path)
    return [bpe.apply([x])[0] for x in lines]


def bpe_goldens(out):
    moses = {lang: json.load(open(os.path.join(out, f"moses.{lang}.json"), encoding="utf-8")) for lang in ["en", "de"]}
    inputs = moses["en"]["tokenize"]["escape+dash"] + moses["de"]["tokenize"]["escape+dash"] + STRESS
    result = {"subword_nmt": subword_nmt.__file__ and "0.3.8", "inputs": inputs, "codes": {}}
    for name in ["bpecodes", "bpecodes.v01"]:
        bpe = SubwordNMTBPE(Namespace(bpe_codes=os.path.join(out, name), bpe_separator="@@"))
        encoded = [bpe.encode(x) for x in inputs]
        result["codes"][name] = {"source": "subword_nmt.apply_bpe via fairseq SubwordNMTBPE",
                                 "encoded": encoded, "decoded": [bpe.decode(x) for x in encoded]}
    fast = fastbpe_apply(os.path.join(out, "bpecodes.fastbpe"), inputs)
    if fast is not None:
        result["codes"]["bpecodes.fastbpe"] = {"source": "fastBPE python binding (fastBPE.apply)",
                                               "encoded": fast,
                                               "decoded": [(x + " ").replace("@@ ", "").rstrip() for x in fast]}
    dump(os.path.join(out, "bpe.json"), result)


def spm_goldens(out):
    os.makedirs(os.path.join(out, "spm"), exist_ok=True)
    train = read_gz(f"{MULTI30K}/train.en.gz")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(train) + "\n")
        train_path = f.name
    # unigram: the defaults (nmt_nfkc normalizer with its precompiled charsmap).
    spm.SentencePieceTrainer.train(input=train_path, model_prefix=os.path.join(out, "spm/unigram"),
                                   model_type="unigram", vocab_size=500, num_threads=1,
                                   minloglevel=2)
    # bpe: identity normalizer (no charsmap, keeps the file small) and byte fallback.
    spm.SentencePieceTrainer.train(input=train_path, model_prefix=os.path.join(out, "spm/bpe"),
                                   model_type="bpe", vocab_size=500, num_threads=1,
                                   normalization_rule_name="identity", byte_fallback=True,
                                   minloglevel=2)
    os.unlink(train_path)
    for v in ["unigram", "bpe"]:
        os.unlink(os.path.join(out, f"spm/{v}.vocab"))
    # Real-world models (knn-seq's toy en-ja, MIT): copied so the tests do not need /work/shared.
    for lang in ["en", "ja"]:
        shutil.copyfile(f"{KNNSEQ_SPM}/{lang}.model", os.path.join(out, f"spm/knnseq-{lang}.model"))
    inputs = read_gz(f"{MULTI30K}/val.en.gz", 300) + STRESS + SPM_EXTRA
    models = {
        "spm/unigram.model": os.path.join(out, "spm/unigram.model"),
        "spm/bpe.model": os.path.join(out, "spm/bpe.model"),
        "spm/knnseq-en.model": os.path.join(out, "spm/knnseq-en.model"),
        "spm/knnseq-ja.model": os.path.join(out, "spm/knnseq-ja.model"),
    }
    result = {"sentencepiece": spm.__version__, "inputs": inputs, "models": {}}
    for name, path in models.items():
        bpe = SentencepieceBPE(Namespace(sentencepiece_model=path, sentencepiece_enable_sampling=False,
                                         sentencepiece_alpha=None))
        encoded = [bpe.encode(x) for x in inputs]
        ids = [bpe.sp.Encode(x) for x in inputs]
        result["models"][name] = {"encoded": encoded, "ids": ids,
                                  "decoded": [bpe.decode(x) for x in encoded]}
    dump(os.path.join(out, "spm.json"), result)


def pipeline_goldens(out):
    """tokenizer.encode -> bpe.encode, and bpe.decode -> tokenizer.decode, as the hub chains them."""
    result = {"cases": []}
    cases = [
        ("moses", "subword_nmt", "bpecodes", "en", "de", "en"),
        ("moses", "subword_nmt", "bpecodes", "de", "en", "de"),
        ("moses", "subword_nmt", "bpecodes", "fr", "en", "fr"),
        ("space", "subword_nmt", "bpecodes", "en", "de", "en"),
        (None, "sentencepiece", "spm/unigram.model", "en", "de", "en"),
    ]
    from fairseq.data.encoders.space_tokenizer import SpaceTokenizer
    for tokenizer, bpe_kind, codes, src, tgt, data_lang in cases:
        inputs = read_gz(f"{MULTI30K}/val.{data_lang}.gz", 200)[100:200] + STRESS
        if tokenizer == "moses":
            tok = FairseqMoses(Namespace(source_lang=src, target_lang=src, moses_no_dash_splits=False,
                                         moses_no_escape=False))
        elif tokenizer == "space":
            tok = SpaceTokenizer(Namespace())
        else:
            tok = None
        if bpe_kind == "subword_nmt":
            bpe = SubwordNMTBPE(Namespace(bpe_codes=os.path.join(out, codes), bpe_separator="@@"))
        else:
            bpe = SentencepieceBPE(Namespace(sentencepiece_model=os.path.join(out, codes),
                                             sentencepiece_enable_sampling=False, sentencepiece_alpha=None))

        def encode(x):
            if tok is not None:
                x = tok.encode(x)
            return bpe.encode(x)

        def decode(x):
            x = bpe.decode(x)
            if tok is not None:
                x = tok.decode(x)
            return x

        encoded = [encode(x) for x in inputs]
        result["cases"].append({
            "tokenizer": tokenizer, "bpe": bpe_kind, "codes": codes,
            # decode uses the tokenizer's target_lang; we decode with the same language.
            "lang": src, "inputs": inputs, "encoded": encoded,
            "roundtrip": [decode(x) for x in encoded],
        })
    dump(os.path.join(out, "pipeline.json"), result)


def ids_goldens(out):
    """fairseq Dictionary.encode_line on encoded text and Dictionary.string back (knn-seq en)."""
    from fairseq.data import Dictionary
    shutil.copyfile(os.path.join(SHARED, "wild", "knnseq-toy-en-ja", "data-bin", "dict.en.txt"), os.path.join(out, "dict.knnseq.en.txt"))
    d = Dictionary.load(os.path.join(out, "dict.knnseq.en.txt"))
    bpe = SentencepieceBPE(Namespace(sentencepiece_model=os.path.join(out, "spm/knnseq-en.model"),
                                     sentencepiece_enable_sampling=False, sentencepiece_alpha=None))
    inputs = [x.strip() for x in read_gz(f"{MULTI30K}/val.en.gz", 50)]
    encoded = [bpe.encode(x) for x in inputs]
    ids = [d.encode_line(x, add_if_not_exist=False, append_eos=True).tolist() for x in encoded]
    strings_back = [d.string(torch.tensor(i)) for i in ids]
    dump(os.path.join(out, "ids.json"), {"dict": "dict.knnseq.en.txt", "model": "spm/knnseq-en.model",
                                         "inputs": inputs, "encoded": encoded, "ids": ids,
                                         "decoded": [bpe.decode(x) for x in strings_back]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests/fixtures/text"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "stress.json"), "w", encoding="utf-8") as f:
        json.dump(STRESS, f, ensure_ascii=False, indent=0)
    moses_goldens(out)
    learn_codes(out)
    bpe_goldens(out)
    spm_goldens(out)
    pipeline_goldens(out)
    ids_goldens(out)


if __name__ == "__main__":
    main()
