"""The Ray Data example in local mode: its translations equal `tchseq translate`'s."""

import csv
import subprocess
import sys
from pathlib import Path

import ray

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "ray"))

from translate_dataset import translate_csv  # noqa: E402

MODEL = ROOT / "weights" / "multi30k.en-de"
BIN = ROOT / "target" / "release" / "tchseq"


def test_map_batches_translates_like_the_cli(tmp_path):
    import gzip
    data = ROOT.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"
    if data.exists():
        sentences = gzip.open(data, "rt", encoding="utf-8").read().splitlines()[:40]
    else:
        sentences = ["A dog runs.", "Two dogs are playing in the snow.", "The cat sleeps."] * 10
    path = tmp_path / "input.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "source"])
        for i, s in enumerate(sentences):
            w.writerow([i, s])
    cli = subprocess.run([str(BIN), "--threads", "1", "translate", "--batch-size", "1", "-m", str(MODEL), *sentences],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    # the actors import the example module too
    env = {"env_vars": {"PYTHONPATH": str(ROOT / "examples" / "ray")}}
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True, runtime_env=env)
    try:
        rows = translate_csv(str(path), MODEL, concurrency=2, batch_size=8).to_pandas().sort_values("id")
    finally:
        ray.shutdown()
    assert list(rows["id"]) == list(range(len(sentences)))
    assert list(rows["translation"]) == cli
