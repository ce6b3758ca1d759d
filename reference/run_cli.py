#!/usr/bin/env python3
"""Runs fairseq-interactive / fairseq-generate invocations in one Python process.

Each job calls the console script's own entry point (fairseq_cli.{interactive,generate}.cli_main)
with sys.argv set to the job's argv, exactly what the `fairseq-*` executables do, and captures
its stdout; fairseq's log lines are dropped, every other line is kept verbatim. One process
for many runs avoids importing fairseq ~100 times (the only difference from separate processes;
fairseq seeds torch/numpy at the start of each main when --seed is given, and nothing else
here is random). `reference/fixtures.py --check-cli` compares this with real subprocesses.

Usage: run_cli.py JOBS.json   where JOBS.json = [{"argv": [...], "out": "path"}, ...]
"""
import contextlib
import io
import json
import re
import sys

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ")


def main():
    from fairseq_cli import generate, interactive

    entry = {"fairseq-interactive": interactive.cli_main, "fairseq-generate": generate.cli_main}
    for job in json.load(open(sys.argv[1])):
        argv = job["argv"]
        buf = io.StringIO()
        sys.argv = argv[:]
        with contextlib.redirect_stdout(buf):
            entry[argv[0]]()
        lines = [l for l in buf.getvalue().splitlines() if not LOG_LINE.match(l)]
        with open(job["out"], "w", encoding="utf-8") as f:
            f.write("".join(l + "\n" for l in lines))


if __name__ == "__main__":
    main()
