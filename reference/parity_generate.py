"""make parity's fairseq-generate jobs: every command line of tests/fixtures/generate/runs.json
(reference/generate_goldens.sh), and more searches on each small fixture's and the bundled
model's test splits, given unchanged to `tchseq generate`. The outputs are
compared line by line, log lines dropped, the closing score line included."""

import json
import os

from parity_paths import BUNDLED, BUNDLED_SR, ROOT


def jobs(fixtures):
    out = []
    with open(os.path.join(ROOT, "tests/fixtures/generate/runs.json"), encoding="utf-8") as f:
        runs = json.load(f)
    for r in runs:
        if r["results_path"]:
            # what it writes is the golden test's; stdout holds fairseq's log alone
            continue
        out.append({"name": f"generate/{r['name']}", "kind": "interactive",
                    "fairseq": ["fairseq-generate"] + r["argv"], "tchseq": ["generate"] + r["argv"]})
    # each fixture's test split, binarized with its dictionaries by reference/generate_goldens.sh
    for fx in fixtures:
        for tag, opts in [("beam5_batch16", ["--batch-size", "16"]),
                          ("beam4_lenpen0.6_nbest2_maxtokens64", ["--beam", "4", "--lenpen", "0.6", "--nbest", "2",
                                                                   "--max-tokens", "64"])]:
            argv = [f"tests/fixtures/generate/models/{fx['name']}", "--path", f"{fx['dir']}/model.pt", "--cpu",
                    "-s", fx["source_lang"], "-t", fx["target_lang"]] + opts
            out.append({"name": f"{fx['name']}/generate_{tag}", "kind": "interactive",
                        "fairseq": ["fairseq-generate"] + argv, "tchseq": ["generate"] + argv})
    # the bundled model on Multi30k's first 100 test sentences
    base = [f"{BUNDLED_SR}/data-bin", "--path", f"{BUNDLED}/model.pt", "--cpu", "-s", "en", "-t", "de"]
    for tag, opts in [("default", []),
                      ("batch1", ["--batch-size", "1"]),
                      ("remove_bpe_sacrebleu_nbest3", ["--remove-bpe", "--scoring", "sacrebleu", "--nbest", "3",
                                                       "--max-tokens", "1000"]),
                      ("remove_bpe_bleu_alignment", ["--remove-bpe", "--print-alignment", "--batch-size", "32"])]:
        out.append({"name": f"bundled/generate_{tag}", "kind": "interactive",
                    "fairseq": ["fairseq-generate"] + base + opts, "tchseq": ["generate"] + base + opts})
    return out
