"""`make bench-serve`: `tchseq serve` under K concurrent clients on loopback, beside `tchseq
translate` on the same sentences. Writes bench/serve-results.md.

Each client sends one raw sentence per POST /v1/translate. Reported per K: p50/p99 latency,
sentences/s, the server's peak RSS, failed requests, and how many hypotheses differ from the CLI's
(a difference whose scores are within 1e-4 of each other is a near tie, as in the parity tests).

    python bench/serve.py [--lines 500] [--clients 1,8,64] [--threads 2] [--max-wait-ms 5]
"""

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import cpu

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "tchseq"
MODEL = ROOT / "weights" / "multi30k.en-de"


def sentences(n):
    data = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data" / "multi30k"))
    lines = gzip.open(data / "test_2016_flickr.en.gz", "rt", encoding="utf-8").read().splitlines()
    return [l.strip() for l in lines[:n]]


def cli_translate(lines, threads):
    """`tchseq translate --format jsonl` over the file, batched as a file is: (text, score) per line."""
    start = time.perf_counter()
    out = subprocess.run(
        [str(BIN), "--threads", str(threads), "translate", "-m", str(MODEL), "--format", "jsonl",
         "--max-tokens", "4096", "--buffer-size", "1024"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    best = []
    for line in out.stdout.splitlines():
        h = json.loads(line)["hypotheses"][0]
        best.append((h["text"], h["score"]))
    return best, seconds


def start_server(threads, max_wait_ms, extra):
    p = subprocess.Popen(
        [str(BIN), "--threads", str(threads), "serve", "-m", str(MODEL), "--port", "0",
         "--max-wait-ms", str(max_wait_ms), "--queue-size", "100000", *extra],
        stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(2))
    raise SystemExit("tchseq serve did not start")


def peak_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load(port, lines, clients):
    url = f"http://127.0.0.1:{port}/v1/translate"
    results = [None] * len(lines)
    latencies = []
    failures = []
    lock = threading.Lock()
    next_index = [0]

    def client():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(lines):
                return
            body = json.dumps({"text": lines[i]}).encode()
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    reply = json.load(r)
                h = reply["translations"][0]["hypotheses"][0]
                results[i] = (h["text"], h["score"])
            except (urllib.error.URLError, KeyError, ValueError) as e:
                with lock:
                    failures.append(f"{i}: {e}")
            with lock:
                latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, latencies, failures, time.perf_counter() - start


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-wait-ms", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "serve-results.md"))
    args = ap.parse_args()
    lines = sentences(args.lines)
    cli, cli_seconds = cli_translate(lines, args.threads)
    rows = []
    for k in [int(x) for x in args.clients.split(",")]:
        server, port = start_server(args.threads, args.max_wait_ms, [])
        try:
            results, lat, failures, seconds = load(port, lines, k)
            rss = peak_rss_mib(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=60)
        differ = [(i, r, c) for i, (r, c) in enumerate(zip(results, cli)) if r is not None and r[0] != c[0]]
        near = [d for d in differ if abs(d[1][1] - d[2][1]) <= 1e-4]
        rows.append(dict(clients=k, p50=pct(lat, 0.5) * 1000, p99=pct(lat, 0.99) * 1000, sps=len(lines) / seconds,
                         rss=rss, failed=len(failures), differ=len(differ), near=len(near), seconds=seconds))
        print(f"K={k}: {rows[-1]}", flush=True)
        for f in failures[:5]:
            print("  failed:", f)
        for i, r, c in differ[:5]:
            print(f"  line {i}: server {r} vs cli {c}")
    md = [
        "# tchseq serve under load",
        "",
        f"Machine: {cpu.describe()}, {os.cpu_count()} cores; `--threads {args.threads}`, "
        f"`--max-wait-ms {args.max_wait_ms}`. {len(lines)} sentences of Multi30k test_2016_flickr (raw text), beam 5, "
        "one sentence per request, K clients on loopback.",
        "",
        f"`tchseq translate` on the same sentences as a file (`--max-tokens 4096 --buffer-size 1024`): "
        f"{cli_seconds:.2f} s, {len(lines) / cli_seconds:.1f} sentences/s (start-up included).",
        "",
        "| clients | p50 ms | p99 ms | sentences/s | vs translate | peak RSS MiB | failed | ≠ CLI (near ties) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(f"| {r['clients']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['sps']:.1f} | "
                  f"{r['sps'] / (len(lines) / cli_seconds):.2f}× | {r['rss']:.0f} | {r['failed']} | {r['differ']} ({r['near']}) |")
    md += ["", "Reproduce: `make bench-serve` (or `python3 bench/serve.py --lines 500 --clients 1,8,64`)."]
    Path(args.out).write_text("\n".join(md) + "\n")
    print("\n".join(md))
    bad = sum(r["failed"] for r in rows) + sum(r["differ"] - r["near"] for r in rows)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
