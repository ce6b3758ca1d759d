#!/usr/bin/env python3
"""Prove a converted Hugging Face directory faithful to the fairseq checkpoint it came from, with
transformers' own classes, and measure how transformers' generate() compares with fairseq's
committed beam-search goldens.

Usage (repository root, `source reference/env.sh`, HF_HUB_OFFLINE=1):
  python reference/hf_check.py m2m  tests/fixtures/multilingual/m2m tests/fixtures/hf/m2m MANIFEST
  python reference/hf_check.py fsmt tests/fixtures/models/postnorm  tests/fixtures/hf/fsmt-postnorm MANIFEST

1. forward: fairseq (checkpoint_utils.load_model_ensemble_and_task, eval, no_grad, the verify
   goldens' forward) and `<Model>.from_pretrained(HF_DIR)` (eval, fp32) on the same batch:
   source left-padded as fairseq pads it (HF gets attention_mask = src != pad), decoder input =
   fairseq's prev_output_tokens (no decoder_attention_mask: fairseq masks nothing but the future).
   Max abs differences of encoder output, every hidden state, logits and log-probs, over all
   positions and over non-pad positions, for attn_implementation "sdpa" (the default) and "eager".
2. tokenizer: `AutoTokenizer.from_pretrained(HF_DIR)` vs the fixture's fairseq text pipeline on
   every golden input line.
3. generate: transformers' beam search on the golden inputs vs the committed fairseq-interactive
   goldens (top hypothesis and the 2-best list), with the settings in the manifest.
Results are merged into MANIFEST under checks.<name>.
"""
import json
import math
import os
import sys

import torch

from hf_fairseq import Fixture, read_interactive  # reference/

torch.manual_seed(1)
MAXABS_LIMIT = 1e-5


def maxabs(a, b, mask=None):
    dt = torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32
    d = (a.to(dt) - b.to(dt)).abs()
    if mask is not None:
        d = d[mask]
    return float(d.max()) if d.numel() else 0.0


def hf_model(kind, hf_dir, attn):
    if kind == "m2m":
        from transformers import M2M100ForConditionalGeneration as C
    else:
        from transformers import FSMTForConditionalGeneration as C
    kw = {} if kind == "fsmt" else {"attn_implementation": attn}
    return C.from_pretrained(hf_dir, torch_dtype=torch.float32, **kw).eval()


def forward_check(kind, fx, hf_dir, src_lines, tgt_lines, rows_desc):
    b = fx.batch(src_lines, tgt_lines)
    ref = fx.forward(b)
    pad = fx.sd.pad()
    src_mask = b["src_tokens"].ne(pad)
    tgt_mask = b["prev_output_tokens"].ne(pad)
    res = {
        "batch": rows_desc,
        "src_tokens": b["src_tokens"].tolist(),
        "prev_output_tokens": b["prev_output_tokens"].tolist(),
        "fairseq_encoder_path": ref["encoder_path"],
        "by_attn_implementation": {},
    }
    impls = ["sdpa", "eager"] if kind == "m2m" else ["eager (FSMT has only its own attention)"]
    for impl in impls:
        model = hf_model(kind, hf_dir, impl.split()[0])
        with torch.no_grad():
            out = model(
                input_ids=b["src_tokens"],
                attention_mask=src_mask.long(),
                decoder_input_ids=b["prev_output_tokens"],
                # fairseq masks padded decoder keys too (self_attn_padding_mask); only rows that
                # are padding themselves see a difference
                decoder_attention_mask=tgt_mask.long(),
                output_hidden_states=True,
                use_cache=False,
            )
        logits = out.logits
        lprobs = torch.log_softmax(logits.float(), dim=-1)
        enc_h, dec_h = out.encoder_hidden_states, out.decoder_hidden_states
        L_enc, L_dec = len(enc_h) - 1, len(dec_h) - 1
        d = {
            "encoder_out": maxabs(out.encoder_last_hidden_state, ref["encoder_out"], src_mask),
            "encoder_out_all_positions": maxabs(out.encoder_last_hidden_state, ref["encoder_out"]),
            "logits": maxabs(logits, ref["logits"], tgt_mask),
            "logits_all_positions": maxabs(logits, ref["logits"]),
            "lprobs": maxabs(lprobs, ref["lprobs"], tgt_mask),
            "lprobs_all_positions": maxabs(lprobs, ref["lprobs"]),
            "argmax_equal": bool(torch.equal(logits.argmax(-1)[tgt_mask], ref["logits"].argmax(-1)[tgt_mask])),
        }
        # hidden states: HF hidden_states[i] = fairseq inner_states[i] for i < L; HF's last one is
        # after the final LayerNorm (M2M100) = fairseq encoder_out / decoder features, while
        # fairseq's inner_states[L] is before it. FSMT (post-norm, no final LN): all L+1 equal.
        for i in range(L_enc + 1):
            r = ref["encoder_states"][i]
            if i == L_enc and kind == "m2m":
                r = ref["encoder_out"]
            d[f"encoder_hidden_states.{i}"] = maxabs(enc_h[i], r, src_mask)
        for i in range(L_dec + 1):
            r = ref["decoder_inner_states"][i]
            if i == L_dec and kind == "m2m":
                r = ref["decoder_features"]
            d[f"decoder_hidden_states.{i}"] = maxabs(dec_h[i], r, tgt_mask)
        worst = max(v for k, v in d.items() if isinstance(v, float) and not k.endswith("_all_positions"))
        d["max_over_non_pad"] = worst
        d["within_1e-5"] = worst <= MAXABS_LIMIT
        res["by_attn_implementation"][impl] = d
        print(f"[forward {impl}] " + json.dumps({k: v for k, v in d.items()}), flush=True)
    # float64: both models cast to double, same batch. Rounding no longer hides a wrong mapping;
    # what is left is the conversion's own error (expected ~1e-12).
    import copy

    import fairseq.utils as fu

    f32_model = fx.model
    fx.model = copy.deepcopy(f32_model).double()
    # fairseq's utils.softmax / log_softmax compute in float32 whatever the input dtype; keep the
    # input dtype for this run only
    saved = fu.softmax, fu.log_softmax
    fu.softmax = lambda x, dim, onnx_trace=False: torch.softmax(x, dim=dim)
    fu.log_softmax = lambda x, dim, onnx_trace=False: torch.log_softmax(x, dim=dim)
    try:
        ref64 = fx.forward(b)
    finally:
        fx.model = f32_model
        fu.softmax, fu.log_softmax = saved
    model = hf_model(kind, hf_dir, "eager").double()
    if kind == "fsmt":
        # FSMT's fill_with_neg_inf does t.float().fill_(finfo(t.dtype).min), which overflows for
        # float64 (a transformers bug that only float64 hits); same function, without the cast
        import transformers.models.fsmt.modeling_fsmt as fsmt_mod

        fsmt_mod.fill_with_neg_inf = lambda t: t.fill_(torch.finfo(t.dtype).min)
    with torch.no_grad():
        out = model(input_ids=b["src_tokens"], attention_mask=src_mask.long(),
                    decoder_input_ids=b["prev_output_tokens"], decoder_attention_mask=tgt_mask.long(),
                    use_cache=False)
    d64 = {
        "encoder_out": maxabs(out.encoder_last_hidden_state.double(), ref64["encoder_out"].double(), src_mask),
        "logits": maxabs(out.logits.double(), ref64["logits"].double(), tgt_mask),
        "lprobs": maxabs(torch.log_softmax(out.logits.double(), -1), ref64["lprobs"].double(), tgt_mask),
    }
    # how far is each float32 run from the float64 result (each side's own rounding error)?
    d64["fairseq_float32_vs_float64_logits"] = maxabs(ref["logits"].double(), ref64["logits"].double(), tgt_mask)
    d64["hf_float32_vs_float64_logits"] = maxabs(logits.double(), out.logits.double(), tgt_mask)
    res["float64"] = {k: float(f"{v:.3e}") for k, v in d64.items()}
    res["float64_note"] = ("both models cast to float64 (fairseq's utils.softmax/log_softmax, which "
                           "always compute in float32, patched to keep float64 for this run)")
    res["max_abs_logit"] = float(ref["logits"][tgt_mask].abs().max())
    print("[forward float64] " + json.dumps(res["float64"]), flush=True)
    return res


def tokenizer_check(kind, fx, hf_dir, sets):
    """sets: [(lang, file)]. Compares the full id sequence the encoder sees."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_dir)
    res = {"tokenizer_class": type(tok).__name__, "by_file": {}}
    for lang, path in sets:
        lines = [l.rstrip("\n") for l in open(path, encoding="utf-8")]
        full = pieces_eq = 0
        diffs = []
        for n, line in enumerate(lines):
            ref = fx.source_ids(line, lang).tolist()
            if kind == "m2m":
                tok.src_lang = lang
                hf = tok(line).input_ids
                # fairseq: [__lang__] + pieces + </s>; HF: [its own __lang__ id] + pieces + </s>
                same_pieces = hf[1:] == ref[1:]
            else:
                hf = tok(line).input_ids
                same_pieces = hf == ref
            full += hf == ref
            pieces_eq += same_pieces
            if hf != ref and len(diffs) < 3:
                diffs.append({"line": n + 1, "fairseq": ref, "hf": hf})
        r = {"lines": len(lines), "identical_ids": full, "identical_ids_except_language_token": pieces_eq,
             "first_differences": diffs}
        if kind == "m2m":
            r["hf_language_token_id"] = tok.get_lang_id(lang)
            r["fairseq_language_token_id"] = fx.lang_id(lang)
        res["by_file"][os.path.relpath(path)] = r
        print(f"[tokenizer {path}] identical {full}/{len(lines)}, except language token {pieces_eq}/{len(lines)}",
              flush=True)
    return res


def fairseq_style_scores(model, src, prev_with_eos, pad):
    """Sum and count of log-probs of every hypothesis token after the decoder start (what the
    fairseq P- line lists: for m2m the forced language token, the pieces and </s>)."""
    with torch.no_grad():
        out = model(input_ids=src, attention_mask=src.ne(pad).long(), decoder_input_ids=prev_with_eos[:, :-1],
                    use_cache=False)
    lp = torch.log_softmax(out.logits.float(), -1)
    tgt = prev_with_eos[:, 1:]
    g = lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    mask = tgt.ne(pad)
    return (g * mask).sum(-1), mask.sum(-1)


class KeepOnlyAt:
    """At generated position `pos` (1 = the first token after the decoder start) keep only `token`
    and **its log-prob** (fairseq's prefix forcing and its EOS forcing at max_len keep the model's
    score; transformers' ForcedBOS/ForcedEOS processors set it to 0)."""

    def __init__(self, pos, token):
        self.pos, self.token = pos, token

    def __call__(self, input_ids, scores):
        if input_ids.shape[-1] == self.pos:
            keep = scores[:, self.token].clone()
            scores = torch.full_like(scores, -math.inf)
            scores[:, self.token] = keep
        return scores


def generate_check(kind, fx, hf_dir, runs, batch_size=16):
    """runs: [(src_lang, tgt_lang, input file, golden file, nbest)]."""
    model = hf_model(kind, hf_dir, "sdpa")
    gc = model.generation_config
    pad, eos = fx.sd.pad(), fx.sd.eos()
    res = {"generation_config": {k: v for k, v in gc.to_dict().items() if k in (
        "num_beams", "max_length", "early_stopping", "length_penalty", "forced_eos_token_id",
        "suppress_tokens", "decoder_start_token_id", "eos_token_id", "pad_token_id")}, "runs": {}}
    for src_lang, tgt_lang, inp, golden, nbest in runs:
        lines = [l.rstrip("\n") for l in open(inp, encoding="utf-8")]
        gold = read_interactive(golden)
        variants = {}
        # fairseq: max_len = min(0 * src_len + 200, 1024 - 1) = 200 -> at most 201 tokens after the
        # decoder start, the last one forced to </s>; generate's max_length counts the start token
        max_length = gc.max_length
        variant_defs = {
            # generation_config.json as saved (ForcedEOS at max_length - 1 with score 0)
            "generation_config": {},
            # FSMT's cached decoding is broken in this transformers release (see README); without
            # the cache FSMTModel builds no causal mask when generate() calls it
            "use_cache_false": {"use_cache": False},
        }
        if kind == "m2m":
            variant_defs = {
                # what transformers' M2M100 docs do: forced_bos_token_id = target language
                "forced_bos": {"forced_bos_token_id": fx.lang_id(tgt_lang)},
                # the language token as part of the decoder prompt instead (not scored, not counted)
                "decoder_prompt": {"prompt": True},
                "fairseq_exact": {"exact": True, "prefix": fx.lang_id(tgt_lang)},
            }
        for vname, vdef in variant_defs.items():
            hyps = {}
            for start in range(0, len(lines), batch_size):
                chunk = lines[start:start + batch_size]
                b = fx.batch(chunk, src_lang=src_lang)
                kw = dict(num_beams=5, num_return_sequences=nbest, return_dict_in_generate=True,
                          output_scores=True)
                if vdef.get("prompt"):
                    kw["decoder_input_ids"] = torch.tensor([[eos, fx.lang_id(tgt_lang)]] * len(chunk))
                elif "forced_bos_token_id" in vdef:
                    kw["forced_bos_token_id"] = vdef["forced_bos_token_id"]
                if "use_cache" in vdef:
                    kw["use_cache"] = vdef["use_cache"]
                if vdef.get("exact"):
                    from transformers import LogitsProcessorList

                    procs = [KeepOnlyAt(max_length - 1, eos)]
                    if "prefix" in vdef:
                        procs.append(KeepOnlyAt(1, vdef["prefix"]))
                    kw["logits_processor"] = LogitsProcessorList(procs)
                    kw["forced_eos_token_id"] = None
                with torch.no_grad():
                    g = model.generate(input_ids=b["src_tokens"], attention_mask=b["src_tokens"].ne(pad).long(), **kw)
                seqs = g.sequences.view(len(chunk), nbest, -1)
                scores = g.sequences_scores.view(len(chunk), nbest)
                for j in range(len(chunk)):
                    hyps[start + j] = []
                    for k in range(nbest):
                        ids = seqs[j, k].tolist()
                        hyps[start + j].append({"ids": ids, "hf_score": float(scores[j, k])})
            # strip as fairseq's H- line does: decoder start, language token, </s>, padding
            strip = {pad, eos}
            if kind == "m2m":
                strip.add(fx.lang_id(tgt_lang))
            top1 = both = 0
            mism = []
            nbest_diff = []
            score_diff = 0.0
            for i in range(len(lines)):
                ours = [" ".join(fx.td[t] for t in h["ids"] if t not in strip) for h in hyps[i]]
                theirs = [h[1] for h in gold[i]["H"]]
                eq1 = ours[0] == theirs[0]
                top1 += eq1
                both += ours == theirs
                for k in range(min(len(ours), len(theirs))):
                    if ours[k] == theirs[k]:
                        # fairseq's H- score (mean log-prob, lenpen 1) vs generate's sequences_scores
                        # (fairseq-interactive prints H-/P- scores in base 2: x ln 2)
                        score_diff = max(score_diff, abs(hyps[i][k]["hf_score"] - gold[i]["H"][k][0] * math.log(2)))
                if not eq1:
                    mism.append(i)
                elif ours != theirs and len(nbest_diff) < 5:
                    nbest_diff.append({"line": i + 1, "fairseq": [list(h) for h in gold[i]["H"]],
                                       "hf": [[h["hf_score"], o] for h, o in zip(hyps[i], ours)]})
            # for mismatches: which of the two does fairseq's scoring (mean over lang token, pieces,
            # </s>) prefer? -> search difference vs scoring difference
            explain = {"fairseq_hyp_scores_higher_fairseq_style": 0, "hf_hyp_scores_higher_fairseq_style": 0,
                       "hf_hyp_longer": 0, "hf_hyp_shorter": 0, "same_length": 0}
            details = []
            for i in mism:
                src = fx.batch([lines[i]], src_lang=src_lang)["src_tokens"]
                hf_ids = [t for t in hyps[i][0]["ids"] if t != pad]
                if hf_ids[-1] != eos:
                    hf_ids.append(eos)
                g_pieces = gold[i]["H"][0][1]
                g_ids = [eos] + ([fx.lang_id(tgt_lang)] if kind == "m2m" else []) + \
                    fx.td.encode_line(g_pieces, add_if_not_exist=False, append_eos=True).long().tolist()
                L = max(len(hf_ids), len(g_ids))
                prev = torch.tensor([hf_ids + [pad] * (L - len(hf_ids)), g_ids + [pad] * (L - len(g_ids))])
                s, n = fairseq_style_scores(model, src.repeat(2, 1), prev, pad)
                mean = (s / n).tolist()
                if mean[1] >= mean[0]:
                    explain["fairseq_hyp_scores_higher_fairseq_style"] += 1
                else:
                    explain["hf_hyp_scores_higher_fairseq_style"] += 1
                lh, lg = int(n[0]), int(n[1])
                explain["hf_hyp_longer" if lh > lg else "hf_hyp_shorter" if lh < lg else "same_length"] += 1
                if len(details) < 5:
                    details.append({"line": i + 1, "fairseq": g_pieces,
                                    "hf": " ".join(fx.td[t] for t in hf_ids if t not in strip),
                                    "fairseq_style_mean_logprob": {"hf_hyp": mean[0], "fairseq_hyp": mean[1]},
                                    "scored_tokens": {"hf_hyp": lh, "fairseq_hyp": lg}})
            r = {
                "settings": dict(vdef),
                "input": os.path.relpath(inp), "golden": os.path.relpath(golden), "sentences": len(lines),
                "nbest": nbest, "top1_equal": top1, f"nbest{nbest}_lists_equal": both,
                "max_abs_score_diff_same_hypothesis": score_diff,
                "mismatch_analysis": explain, "mismatch_examples": details,
                "nbest_only_mismatches": nbest_diff,
                "hf_hypotheses_top1": [" ".join(fx.td[t] for t in hyps[i][0]["ids"] if t not in strip)
                                       for i in range(len(lines))],
            }
            variants[vname] = r
            print(f"[generate {src_lang}-{tgt_lang} {vname}] top1 {top1}/{len(lines)} nbest{nbest} {both}/{len(lines)} "
                  f"score diff {score_diff:.2e} {json.dumps(explain)}", flush=True)
        res["runs"][f"{src_lang}-{tgt_lang}"] = variants
    return res


def greedy_check(fx, hf_dir, inp, golden, max_len=202):
    """FSMT only: greedy decoding written out over the model's full forward (whole prefix every
    step, use_cache=False, input_ids given so FSMTModel builds its causal mask) vs fairseq's
    --beam 1 golden: shows the converted model decodes like fairseq when generate() is avoided."""
    model = hf_model("fsmt", hf_dir, "eager")
    pad, eos = fx.sd.pad(), fx.sd.eos()
    lines = [l.rstrip("\n") for l in open(inp, encoding="utf-8")]
    gold = read_interactive(golden)
    same = 0
    score_diff = 0.0
    diffs = []
    for i, line in enumerate(lines):
        src = fx.batch([line])["src_tokens"]
        prev = [eos]
        total = 0.0
        with torch.no_grad():
            enc = model.get_encoder()(input_ids=src, attention_mask=src.ne(pad).long())
            while True:
                out = model(input_ids=src, attention_mask=src.ne(pad).long(), encoder_outputs=enc,
                            decoder_input_ids=torch.tensor([prev]), use_cache=False)
                lp = torch.log_softmax(out.logits[0, -1].float(), -1)
                lp[pad] = -math.inf
                if len(prev) == 1:
                    lp[eos] = -math.inf  # fairseq min_len 1
                if len(prev) == max_len - 1:
                    keep = lp[eos].clone()
                    lp[:] = -math.inf
                    lp[eos] = keep
                t = int(lp.argmax())
                total += float(lp[t])
                prev.append(t)
                if t == eos:
                    break
        hyp = " ".join(fx.td[t] for t in prev[1:-1])
        g_score, g_hyp = gold[i]["H"][0]
        if hyp == g_hyp:
            same += 1
            # fairseq-interactive prints scores in base 2
            score_diff = max(score_diff, abs(total / (len(prev) - 1) - g_score * math.log(2)))
        elif len(diffs) < 5:
            diffs.append({"line": i + 1, "fairseq": g_hyp, "hf_greedy": hyp})
    r = {"input": os.path.relpath(inp), "golden": os.path.relpath(golden), "sentences": len(lines),
         "equal": same, "max_abs_score_diff_same_hypothesis": score_diff, "differences": diffs}
    print(f"[greedy full-forward vs {golden}] equal {same}/{len(lines)} score diff {score_diff:.2e}", flush=True)
    return r


def merge_manifest(path, name, section):
    try:
        m = json.load(open(path))
    except FileNotFoundError:
        m = {}
    m.setdefault("checks", {}).setdefault(name, {}).update(section)
    with open(path, "w") as f:
        json.dump(m, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    kind, src_dir, hf_dir, manifest = sys.argv[1:5]
    steps = (os.environ.get("HF_CHECK_STEPS") or "forward,tokenizer,generate").split(",")
    name = os.path.basename(hf_dir.rstrip("/"))
    section = {"hf_dir": os.path.relpath(hf_dir), "fairseq_dir": os.path.relpath(src_dir),
               "argv": ["python", "reference/hf_check.py"] + sys.argv[1:]}
    if kind == "m2m":
        fx = Fixture("m2m", src_dir, "en", "de")
        base = "tests/fixtures/multilingual"
        ids = [2, 6, 0, 4, 1, 5]  # the verify.pt rows first, then two more
        en = [l.rstrip("\n") for l in open(f"{base}/input.en", encoding="utf-8")]
        de = [l.rstrip("\n") for l in open(f"{base}/input.de", encoding="utf-8")]
        if "forward" in steps:
            section["forward"] = forward_check(
                kind, fx, hf_dir, [en[i] for i in ids], [de[i] for i in ids],
                f"lines {[i + 1 for i in ids]} of {base}/input.en -> input.de (en->de, teacher-forced)")
        if "tokenizer" in steps:
            section["tokenizer"] = tokenizer_check(kind, fx, hf_dir, [(l, f"{base}/input.{l}") for l in ("en", "de", "fr")])
        if "generate" in steps:
            g = f"{src_dir}/goldens"
            section["generate"] = generate_check(kind, fx, hf_dir, [
                ("en", "de", f"{base}/input.en", f"{g}/interactive_en-de_beam5_nbest2.txt", 2),
                ("fr", "en", f"{base}/input.fr", f"{g}/interactive_fr-en_beam5_nbest2.txt", 2),
                ("de", "fr", f"{base}/input.de", f"{g}/interactive_de-fr_beam5_nbest2.txt", 2),
            ])
    elif kind == "fsmt-bundled":
        # weights/multi30k.en-de (Moses + subword-nmt BPE): teacher-forced on the BPE'd
        # score-reference lines; tokenizer vs fairseq's hub pipeline (moses + subword_nmt) on raw text
        kind = "fsmt"
        fx = Fixture("plain", src_dir, "en", "de")
        base = "tests/fixtures/bundled"
        ids = [0, 1, 2, 3, 4, 5]
        src = [l.rstrip("\n") for l in open(f"{base}/score_reference/test.bpe.en", encoding="utf-8")]
        tgt = [l.rstrip("\n") for l in open(f"{base}/score_reference/test.bpe.de", encoding="utf-8")]
        if "forward" in steps:
            section["forward"] = forward_check(
                kind, fx, hf_dir, [src[i] for i in ids], [tgt[i] for i in ids],
                f"lines {[i + 1 for i in ids]} of {base}/score_reference/test.bpe.en -> test.bpe.de (teacher-forced)")
        if "tokenizer" in steps:
            from fairseq.models.transformer import TransformerModel

            hub = TransformerModel.from_pretrained(src_dir, checkpoint_file="model.pt", data_name_or_path=src_dir,
                                                   tokenizer="moses", bpe="subword_nmt",
                                                   bpe_codes=os.path.join(src_dir, "bpecodes"))
            fx.source_ids = lambda line, lang=None: hub.encode(line)
            section["tokenizer"] = tokenizer_check(kind, fx, hf_dir, [("en", f"{base}/input.en")])
    else:
        fx = Fixture("plain", src_dir, "src", "tgt")
        base = "tests/fixtures/models"
        ids = [2, 7, 0, 11, 4, 62, 70]  # the verify_left.pt batch
        src = [l.rstrip("\n") for l in open(f"{base}/inputs.src", encoding="utf-8")]
        tgt = [l.rstrip("\n") for l in open(f"{base}/inputs.tgt", encoding="utf-8")]
        if "forward" in steps:
            section["forward"] = forward_check(
                kind, fx, hf_dir, [src[i] for i in ids], [tgt[i] for i in ids],
                f"rows {ids} of {base}/inputs.src -> inputs.tgt (the verify_left.pt batch, teacher-forced)")
        if "tokenizer" in steps:
            section["tokenizer"] = tokenizer_check(kind, fx, hf_dir, [("src", f"{base}/inputs.src")])
        if "generate" in steps:
            section["generate"] = generate_check(kind, fx, hf_dir, [
                ("src", "tgt", f"{base}/inputs.src", f"{src_dir}/interactive/beam5.txt", 1),
            ])
            section["greedy_full_forward"] = greedy_check(
                fx, hf_dir, f"{base}/inputs.src", f"{src_dir}/interactive/beam1.txt")
    merge_manifest(manifest, name, section)


if __name__ == "__main__":
    main()
