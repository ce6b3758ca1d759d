#!/usr/bin/env python3
"""Goldens for tchseq's port of sacreBLEU 2.5.1's corpus metrics (src/metrics/).

Runs the installed sacrebleu 2.5.1 CLI (`python -m sacrebleu REF... -i HYP ...`) on every case
under several option sets, and its tokenizers on many lines; writes under tests/fixtures/sacrebleu/:
  cases/<name>/hyp.txt, ref0.txt, ref1.txt...   the inputs (bytes exactly as given to the CLI)
  goldens.json   [{case, nrefs, opts: {...}, argv: [...], stdout}]  (exact stdout of the CLI)
  tokenize.json  {tokenizer: [[line, tokenized], ...]}
  unicode_classes.json  {"P"|"S"|"N": [[first, last], ...]}  the regex module's classes (intl)
Run from the repository root:  source reference/env.sh && python reference/sacrebleu_goldens.py
(about 8 minutes; `--no-cli` rewrites only the inputs, tokenize.json and unicode_classes.json)
Reads /work/shared/data/multi30k (never writes there); fetches nothing.
"""
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import sacrebleu
from sacrebleu.metrics.bleu import _get_tokenizer

assert sacrebleu.__version__ == "2.5.1", sacrebleu.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "sacrebleu")
MULTI30K = "/work/shared/data/multi30k"

CASES = {}


def case(name, hyps, *refs, raw=None):
    """hyps/refs: lists of lines (written joined by '\n' with a final newline), or raw bytes."""
    CASES[name] = (hyps, list(refs), raw)


# ---- (a) sacreBLEU's own test-suite cases (test_bleu.py, test_chrf.py, test_ter.py, README),
# recalled and checked here only by running sacrebleu itself.
case("sb_bleu_raw_zero", ["this is a test", "another test"], ["ref1", "ref2"])
case("sb_bleu_raw_perfect", ["this is a test"], ["this is a test"])
case("sb_bleu_raw_fest", ["this is a fest"], ["this is a test"])
case("sb_readme_multiref",
     ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."],
     ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
     ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."])
case("sb_chrf_cs",
     ["Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře.",
      "Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři.",
      "Lapali po dechu, jejich životy skončily dřív, než skutečně začaly."],
     ["Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře.",
      "A někdy nemáme ani potřebný materiál, abychom jim pomohli, řekli lékaři.",
      "Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, připomněla."])
for i, (h, r) in enumerate([("abcdefg", "hijklmnop"), ("a", "b"), ("", "b"), ("", "ref"),
                            ("aa", "ab"), ("a", "a"), ("a b c", "a b c"), ("a b c", "abc")]):
    case(f"sb_chrf_small{i}", [h], [r])
case("sb_chrf_two", ["a", "b"], ["a", "c"])
case("sb_chrf_risk",
     [" risk assessment must be made of those who are qualified and expertise in the sector - these are the scientists ."],
     ["risk assessment has to be undertaken by those who are qualified and expert in that area - that is the scientists ."])
case("sb_chrf_obama",
     [" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. "],
     ["Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich."])
case("sb_chrf_mauer", ["Niemand hat die Absicht, eine Mauer zu errichten"],
     ["Niemand hat die Absicht, eine Mauer zu errichten"])
case("sb_ter_basic",
     ["aaaa bbbb cccc dddd", "dddd eeee ffff", "", "", "d e f g h a b c"],
     ["aaaa bbbb cccc dddd", "aaaa bbbb cccc", "a", "", "a b c d e f g h"])
case("sb_ter_only_empty", [""], [""])
case("sb_ter_german",
     ['wählen Sie " Bild neu berechnen , " um beim Ändern der Bildgröße Pixel hinzuzufügen oder zu entfernen , damit das Bild ungefähr dieselbe Größe aufweist wie die andere Größe .',
      "wenn Sie alle Aufgaben im aktuellen Dokument aktualisieren möchten , wählen Sie im Menü des Aufgabenbedienfelds die Option \" Alle Aufgaben aktualisieren . \""],
     ['wählen Sie " Bild neu berechnen , " um beim Ändern der Bildgröße Pixel hinzuzufügen oder zu entfernen , damit das Bild ungefähr die gleiche Größe wie die andere Größe hat .',
      "wenn Sie alle Aufgaben im aktuellen Dokument aktualisieren möchten , wählen Sie im Menü des Aufgabenbedienfelds die Option \" Alle Aufgaben aktualisieren \" ."])

# ---- (b) our own cases
case("unicode_punct",
     ["„Das ist – wirklich – gut“, sagte er… «Oui» ¿Qué? ¡Sí! 50 € / 3 £ — ok™ © 2024 §3 ½ °C",
      "He said: “hello” — ‘world’ … ok‽ (a) [b] {c} <d> #e @f *g* _h_ ~i~ ^j^ |k| \\l\\",
      "Ελληνικά: Σίσυφος ΣΟΦΟΣ; Русский: «Привет», мир! İstanbul ǅ ß ẞ"],
     ["„Das ist – wirklich – gut“, sagte sie… «Oui» ¿Qué? ¡Sí! 50 € / 3 £ — ok™ © 2024 §3 ½ °C",
      "He said: “hello” — ‘world’ … ok‽ (a) [b] {c} <d> #e @f *g* _h_ ~i~ ^j^ |k| \\l\\",
      "Ελληνικά: σίσυφος σοφος; Русский: «привет», Мир! istanbul ǆ SS ß"])
case("urls_numbers",
     ["See https://example.com/a-b_c?x=1&y=2#frag or mail me@host.org.",
      "It costs 1,000,000.50 dollars, i.e. 1.000.000,50 euros; 3-4 days, 5.5%, -7 and 10:30.",
      "Version 2.5.1 (2024-05-01) vs. v1.0; tel. +49 (0)30 123-456; IP 192.168.0.1.",
      "&amp; &quot;quoted&quot; &lt;tag&gt; <skipped> word- break"],
     ["See https://example.com/a-b_c?x=1&y=2#frag or mail me@host.org .",
      "It costs 1,000,000.50 dollars, i.e. 1.000.000,50 euros; 3 - 4 days, 5.5 %, -7 and 10:30.",
      "Version 2.5.1 (2024-05-01) versus v1.0; tel. +49 (0)30 123-456; IP 192.168.0.1",
      "& \"quoted\" <tag> word-break"])
case("empty_lines",
     ["", "a b c", "", "the end .", ""],
     ["", "a b d", "something", "", ""])
case("cjk",
     ["我们今天去公园散步，天气很好。", "東京は日本の首都です。", "한국어 문장입니다.", "混合 text 和 English 123。",
      "全角：ＡＢＣ１２３！？", "☀ weather ✈ travel ㈱ ㎏"],
     ["今天我们去公园散步，天气非常好。", "日本の首都は東京です。", "한국어 문장이다.", "混合的 text 和 English 123 。",
      "全角：ＡＢＣ１２３！", "☀ weather ✈ travel ㈱ kg"])
case("whitespace",
     ["  leading and trailing  ", "tab\tseparated\twords", "nbsp\u00a0here\u2009thin", "x\u001cfile\u001dsep",
      "ideographic\u3000space", "trailing\u00a0"],
     ["leading and trailing", "tab separated words", "nbsp here thin", "x file sep", "ideographic space", "trailing"])
case("lowercase_mix",
     ["THE Cat SAT on The MAT .", "ÄÖÜ straße STRASSE", "McDonald's iPhone"],
     ["the cat sat on the mat .", "äöü STRASSE straße", "mcdonald's IPHONE"])
case("three_refs",
     ["a cat is on the mat", "there is a dog", "hello"],
     ["the cat is on the mat", "a dog is there", "hello there"],
     ["there is a cat on the mat", "there is a dog here", "hi"],
     ["a cat sits on a mat", "the dog", "hello world !"])
long_h = " ".join(f"w{i % 37} x{i % 11}" for i in range(150))
long_r = " ".join(f"x{i % 11} w{(i * 7) % 37}" for i in range(140))
case("long_lines", [long_h, long_h[::-1]], [long_r, long_r[::-1]])
case("ter_shifts",
     ["c d a b e f", "one two three four five six seven eight nine ten eleven twelve",
      "b a", "x y z a b c d e f g h i j k l", "a a a a b b b b", "the the the"],
     ["a b c d e f", "seven eight nine ten eleven twelve one two three four five six",
      "a b", "a b c d e f g h i j k l x y z", "b b b b a a a a", "the"])
_rng = random.Random(1234)
_vocab = ["a", "b", "c", "d", "the", "of", ",", "."]
_rr = [[_rng.choice(_vocab) for _ in range(_rng.randint(0, 90))] for _ in range(60)]
_rh = []
for _w in _rr:
    _w = list(_w)
    for _ in range(_rng.randint(0, 6)):
        if len(_w) > 2:
            i, j = sorted(_rng.sample(range(len(_w)), 2))
            _w = _w[:i] + _w[j:] + _w[i:j]
    if _w and _rng.random() < 0.3:
        _w[_rng.randrange(len(_w))] = _rng.choice(_vocab)
    _rh.append(_w)
case("random_small_vocab", [" ".join(w) for w in _rh], [" ".join(w) for w in _rr])
case("ter_extreme_ratio",
     ["a b", " ".join(["x y z"] * 60), "w1 w2 w3"],
     [" ".join(f"t{i % 9}" for i in range(130)) + " a b", "x y", " ".join(f"w{i}" for i in range(200))])
case("crlf_and_no_final_newline", None, None, raw=(b"one two\r\nthree four  \r\nfive", [b"one two\nthree four\nfive six\n"]))


def multi30k(n):
    with gzip.open(os.path.join(MULTI30K, "test_2016_flickr.de.gz"), "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def fairseq_outputs():
    ds = {}
    with open(os.path.join(ROOT, "tests/fixtures/bundled/interactive_batch16.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("D-"):
                tag, _score, text = line.rstrip("\n").split("\t")
                ds[int(tag[2:])] = text
    return [ds[i] for i in sorted(ds)]


def perturb(lines):
    out = []
    for i, l in enumerate(lines):
        w = l.split()
        if i % 3 == 0 and len(w) > 3:
            w[1], w[2] = w[2], w[1]
        if i % 5 == 0 and len(w) > 4:
            del w[3]
        if i % 7 == 0 and len(w) > 6:
            w = w[3:] + w[:3]
        if i % 4 == 1:
            w = [x.upper() if j % 2 else x for j, x in enumerate(w)]
        out.append(" ".join(w))
    return out


hyps = fairseq_outputs()
case("fairseq_interactive_de", hyps, multi30k(len(hyps)))
de100 = multi30k(100)
case("multi30k_perturbed", perturb(de100), de100)
case("multi30k_perturbed_2refs", perturb(de100), de100, perturb(list(reversed(de100)))[::-1])

# ---- option sets: (name, opts); opts keys mirror SacrebleuOptions / the CLI flags
ALL = ["bleu", "chrf", "ter"]
OPTION_SETS = [
    ("all_json", dict(metrics=ALL)),
    ("all_text", dict(metrics=ALL, format="text")),
    ("all_json_b", dict(metrics=ALL, score_only=True)),
    ("all_text_b", dict(metrics=ALL, format="text", score_only=True)),
    ("all_text_w3_short", dict(metrics=ALL, format="text", width=3, short=True)),
    ("all_json_w4", dict(metrics=ALL, width=4)),
    ("bleu_default", dict(metrics=["bleu"])),
    ("bleu_text_b", dict(metrics=["bleu"], format="text", score_only=True)),
    ("bleu_lc", dict(metrics=["bleu"], format="text", lowercase=True)),
    ("bleu_intl", dict(metrics=["bleu"], format="text", tokenize="intl")),
    ("bleu_char", dict(metrics=["bleu"], format="text", tokenize="char")),
    ("bleu_none", dict(metrics=["bleu"], format="text", tokenize="none")),
    ("bleu_zh", dict(metrics=["bleu"], format="text", tokenize="zh")),
    ("bleu_floor", dict(metrics=["bleu"], format="text", smooth_method="floor")),
    ("bleu_floor_sv", dict(metrics=["bleu"], format="text", smooth_method="floor", smooth_value=0.25)),
    ("bleu_addk", dict(metrics=["bleu"], format="text", smooth_method="add-k")),
    ("bleu_addk_sv", dict(metrics=["bleu"], format="text", smooth_method="add-k", smooth_value=2.0)),
    ("bleu_none_smooth", dict(metrics=["bleu"], format="text", smooth_method="none")),
    ("chrfpp_json", dict(metrics=["chrf"], chrf_word_order=2)),
    ("chrf_ws_lc_text", dict(metrics=["chrf"], format="text", chrf_whitespace=True, chrf_lowercase=True)),
    ("chrf_eps_text", dict(metrics=["chrf"], format="text", chrf_eps_smoothing=True, chrf_word_order=1)),
    ("ter_cs_text", dict(metrics=["ter"], format="text", ter_case_sensitive=True)),
]


def argv_for(ref_paths, hyp_path, o):
    a = [sys.executable, "-m", "sacrebleu", *ref_paths, "-i", hyp_path, "-m", *o["metrics"], "--no-color", "-q"]
    a += ["-f", o.get("format", "json")]
    if o.get("score_only"): a.append("-b")
    if "width" in o: a += ["-w", str(o["width"])]
    if o.get("short"): a.append("--short")
    if o.get("lowercase"): a.append("-lc")
    if "tokenize" in o: a += ["-tok", o["tokenize"]]
    if "smooth_method" in o: a += ["-s", o["smooth_method"]]
    if "smooth_value" in o: a += ["-sv", str(o["smooth_value"])]
    if "chrf_word_order" in o: a += ["--chrf-word-order", str(o["chrf_word_order"])]
    for flag in ["chrf_whitespace", "chrf_lowercase", "chrf_eps_smoothing", "ter_case_sensitive"]:
        if o.get(flag): a.append("--" + flag.replace("_", "-"))
    return a


def write_cases():
    cdir = os.path.join(OUT, "cases")
    shutil.rmtree(cdir, ignore_errors=True)
    for name, (hyps, refs, raw) in CASES.items():
        d = os.path.join(cdir, name)
        os.makedirs(d)
        if raw is not None:
            hyp_b, ref_bs = raw
        else:
            hyp_b = ("\n".join(hyps) + "\n").encode("utf-8")
            ref_bs = [("\n".join(r) + "\n").encode("utf-8") for r in refs]
        with open(os.path.join(d, "hyp.txt"), "wb") as f:
            f.write(hyp_b)
        for k, rb in enumerate(ref_bs):
            with open(os.path.join(d, f"ref{k}.txt"), "wb") as f:
                f.write(rb)


def run_one(job):
    name, nrefs, oname, o = job
    d = os.path.join("tests", "fixtures", "sacrebleu", "cases", name)
    refs = [os.path.join(d, f"ref{k}.txt") for k in range(nrefs)]
    argv = argv_for(refs, os.path.join(d, "hyp.txt"), o)
    env = dict(os.environ, NO_COLOR="1")
    env.pop("SACREBLEU_FORMAT", None)
    env.pop("PYTHONPATH", None)  # reference/sitecustomize.py imports torch: seconds per run
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{name}/{oname}: sacrebleu failed: {p.stderr.decode()}")
    return {"case": name, "nrefs": nrefs, "option_set": oname, "opts": o,
            "argv": ["sacrebleu"] + argv[3:], "stdout": p.stdout.decode("utf-8")}


def tokenizer_goldens():
    lines = []
    for hyps, refs, raw in CASES.values():
        if raw is None:
            lines += hyps + [l for r in refs for l in r]
    lines += ["Hello, world!", "It's 3.14 and 1,000 - 2-3", "a-\nb\nc", " &amp;&quot;&lt;&gt; ",
              "2024. The end.", "x.y,z", "(1.5)", "email@x.com", "\u2000\u2001\u2a6d\u2a6e\u2f80\u2f81\u2fa1\u2fa2",
              "\U00020000\U0002a6d6 mixed", "¡¿‽⁇※", "a\u0301e\u0300", "\ud7a3\uac00"[0:1] + "가"]
    out = {}
    for name in ["13a", "intl", "char", "none", "zh"]:
        tok = _get_tokenizer(name)()
        seen, pairs = set(), []
        for l in lines:
            if l not in seen:
                seen.add(l)
                pairs.append([l, tok(l)])
        out[name] = pairs
    return out


def unicode_classes():
    """The code points (as inclusive ranges) the `regex` module puts in \\p{P}, \\p{S}, \\p{N}:
    the intl tokenizer's classes, whose Unicode version may differ from Rust's regex crate."""
    import regex
    out = {}
    for cls in ["P", "S", "N"]:
        pat = regex.compile(r"\p{%s}" % cls)
        ranges, start = [], None
        for cp in range(0x110001):
            hit = cp <= 0x10FFFF and not (0xD800 <= cp < 0xE000) and pat.match(chr(cp)) is not None
            if hit and start is None:
                start = cp
            elif not hit and start is not None:
                ranges.append([start, cp - 1])
                start = None
        out[cls] = ranges
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    write_cases()
    with open(os.path.join(OUT, "unicode_classes.json"), "w", encoding="utf-8") as f:
        json.dump(unicode_classes(), f)
        f.write("\n")
    if "--no-cli" in sys.argv:  # only the inputs, the tokenizers' goldens and the classes
        with open(os.path.join(OUT, "tokenize.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_goldens(), f, ensure_ascii=False, indent=1)
            f.write("\n")
        return
    jobs = []
    for name, (hyps, refs, raw) in CASES.items():
        nrefs = len(raw[1]) if raw is not None else len(refs)
        for oname, o in OPTION_SETS:
            jobs.append((name, nrefs, oname, o))
    with ThreadPoolExecutor(max_workers=2) as ex:
        goldens = list(ex.map(run_one, jobs))
    with open(os.path.join(OUT, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "tokenize.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_goldens(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(goldens)} CLI goldens for {len(CASES)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
