"""What fairseq 0.12.2's `--no-repeat-ngram-size` blocker does on this machine, counted.

Runs fairseq-interactive (`fairseq_cli.interactive.cli_main`, as run_cli.py does) with the argv
given, with `NGramRepeatBlock.forward` wrapped: every call is passed through unchanged, and the
wrapper counts, per n, the calls, the steps, the (row, token) bans fairseq's loop made (`bans`),
the log-probabilities the call turned from a finite value into -inf (a ban that can change a
hypothesis), and the rows whose hypothesis so far holds `<pad>` (only a hypothesis already at -inf
can: pad is -inf at every step). It also records
whether fairseq used its CUDA extension (`use_extension`) and the width of the `tokens` it got
(the whole `max_len + 2` buffer, not `tokens[:, :step + 1]`).

Usage (from the repository root, inside `source reference/env.sh`):
  python reference/ngram_probe.py SUMMARY.json fairseq-interactive ARGS... < input
The translation goes to stdout as fairseq prints it; the counts to SUMMARY.json.
"""
import contextlib
import io
import json
import sys

import torch

PAD = 1  # every fairseq Dictionary puts <pad> at index 1 (<s> 0, </s> 2, <unk> 3)


def bans(rows, step, n):
    """How many (row, token) bans `_no_repeat_ngram` makes (its loop, counted)."""
    if step + 2 - n < 0:
        return 0
    return sum(row[-(n - 1):] == row[i : i + n - 1] for row in rows for i in range(step + 2 - n))


def main():
    summary_path, argv = sys.argv[1], sys.argv[2:]
    assert argv[0] == "fairseq-interactive", argv
    from fairseq import ngram_repeat_block
    from fairseq_cli import interactive

    counts = {}
    original = ngram_repeat_block.NGramRepeatBlock.forward

    def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        n = self.no_repeat_ngram_size
        c = counts.setdefault(str(n), {
            "use_extension": self.use_extension, "calls": 0, "max_step": -1, "token_widths": [],
            "bans": 0, "finite_lprobs_banned": 0, "rows_with_a_finite_ban": 0, "rows_with_pad_in_hypothesis": 0,
        })
        before = lprobs.clone()
        out = original(self, tokens, lprobs, bsz, beam_size, step)
        c["calls"] += 1
        c["max_step"] = max(c["max_step"], step)
        if tokens.size(1) not in c["token_widths"]:
            c["token_widths"].append(tokens.size(1))
        banned = torch.isfinite(before) & torch.isneginf(out)
        c["bans"] += bans(tokens.tolist(), step, n)
        c["finite_lprobs_banned"] += int(banned.sum())
        c["rows_with_a_finite_ban"] += int(banned.any(dim=1).sum())
        c["rows_with_pad_in_hypothesis"] += int(tokens[:, 1 : step + 1].eq(PAD).any(dim=1).sum())
        return out

    ngram_repeat_block.NGramRepeatBlock.forward = forward
    sys.argv = argv[:]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        interactive.cli_main()
    sys.stdout.write(buf.getvalue())
    with open(summary_path, "w") as f:
        json.dump({"argv": argv, "blocker": counts}, f, indent=1)


if __name__ == "__main__":
    main()
