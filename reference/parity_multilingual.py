"""make parity's multilingual jobs: fairseq-interactive with each model family's task flags
beside `tchseq translate -m DIR -s SRC -t TGT`, which reads those flags from the checkpoint
(tests/fixtures/multilingual, made by reference/family_goldens.sh)."""

FIX = "tests/fixtures/multilingual"
PAIRS = "en-de,de-en,en-fr,fr-en,de-fr,fr-de"
MBART_LANGS = ("en_XX", "de_DE", "fr_XX")
MBART_PAIRS = ",".join(f"{a}-{b}" for a, b in
                       [("en_XX", "de_DE"), ("de_DE", "en_XX"), ("en_XX", "fr_XX"), ("fr_XX", "en_XX"),
                        ("de_DE", "fr_XX"), ("fr_XX", "de_DE")])


def task_flags(model, encoder_langtok="src"):
    """What fairseq-interactive must be told; tchseq finds it in the checkpoint."""
    d = f"{FIX}/{model}"
    multi = ["--task", "translation_multi_simple_epoch", "--encoder-langtok", encoder_langtok, "--decoder-langtok"]
    return {
        "m2m": multi + ["--lang-pairs", PAIRS, "--lang-dict", f"{d}/lang_list.txt",
                        "--fixed-dictionary", f"{d}/model_dict.txt"],
        "mbart50": multi + ["--lang-pairs", MBART_PAIRS, "--langs", ",".join(MBART_LANGS), "--lang-tok-style", "mbart"],
        "mbart-ft": ["--task", "translation_from_pretrained_bart", "--langs", ",".join(MBART_LANGS)],
        "bart": [],
    }[model]


# (model, source, target, checkpoint, option set)
RUNS = [
    ("m2m", "en", "de", "model.pt", "beam5_nbest2_batch16"),
    ("m2m", "en", "de", "model.pt", "beam5_batch1"),
    ("m2m", "fr", "en", "model.pt", "beam5_nbest2_batch16"),
    ("m2m", "de", "fr", "model.pt", "beam4_lenpen0.6_batch7"),
    ("m2m", "en", "de", "model_init.pt", "beam5_nbest2_batch16"),
    ("mbart50", "en_XX", "de_DE", "model.pt", "beam5_nbest2_batch16"),
    ("mbart50", "fr_XX", "en_XX", "model.pt", "beam4_lenpen0.6_batch7"),
    ("mbart50", "de_DE", "fr_XX", "model.pt", "beam5_batch1"),
    ("bart", "en", "de", "model.pt", "beam5_nbest2_batch16"),
    ("bart", "en", "de", "model.pt", "beam4_lenpen0.6_batch7"),
    ("mbart-ft", "en_XX", "de_DE", "model.pt", "beam5_nbest2_batch16"),
    ("mbart-ft", "en_XX", "de_DE", "model.pt", "beam5_batch1"),
    ("mbart-ft", "en_XX", "de_DE", "model_init.pt", "beam4_lenpen0.6_batch7"),
    # --print-alignment (translation_from_pretrained_bart's plain generator prints empty A- lines)
    ("m2m", "fr", "de", "model.pt", "beam5_align_batch16"),
    ("mbart50", "en_XX", "fr_XX", "model.pt", "beam5_align_batch16"),
    ("bart", "en", "de", "model.pt", "beam5_align_batch16"),
    ("mbart-ft", "en_XX", "de_DE", "model.pt", "beam5_align_batch16"),
    # fairseq's flag over the checkpoint's: the target language's token before the source
    ("m2m", "en", "fr", "model.pt", "beam5_nbest2_batch16", "tgt"),
]

OPTIONS = {
    "beam5_nbest2_batch16": ["--beam", "5", "--nbest", "2", "--buffer-size", "1024", "--batch-size", "16"],
    "beam5_batch1": ["--beam", "5", "--batch-size", "1"],
    "beam4_lenpen0.6_batch7": ["--beam", "4", "--lenpen", "0.6", "--buffer-size", "1024", "--batch-size", "7"],
    "beam5_align_batch16": ["--beam", "5", "--print-alignment", "--buffer-size", "1024", "--batch-size", "16"],
}


def jobs():
    out = []
    for model, src, tgt, ckpt, opts_name, *enc in RUNS:
        d = f"{FIX}/{model}"
        text = f"{FIX}/input.{src[:2]}"
        opts = OPTIONS[opts_name]
        spm = ["--bpe", "sentencepiece", "--sentencepiece-model", f"{d}/sentencepiece.bpe.model"]
        enc_flag = ["--encoder-langtok", enc[0]] if enc else []
        fairseq = (["fairseq-interactive", d, "--path", f"{d}/{ckpt}", "--cpu"] + task_flags(model, *enc)
                   + ["-s", src, "-t", tgt] + spm + ["--input", text] + opts)
        tchseq = ["translate", "-m", d, "--path", f"{d}/{ckpt}", "-s", src, "-t", tgt, "--format", "fairseq",
                  "--input", text] + opts + enc_flag
        tag = ("" if ckpt == "model.pt" else ".init") + (f".encoder_langtok_{enc[0]}" if enc else "")
        out.append({"name": f"multilingual/{model}/{src}-{tgt}{tag}.{opts_name}", "kind": "interactive",
                    "fairseq": fairseq, "tchseq": tchseq})
    return out
