#!/usr/bin/env bash
# fairseq 0.12.2 goldens under tchseq's reproducible mode (tests/fixtures/reproducible): the same
# runs as the other goldens, with MKL_CBWR=AVX2,STRICT ATEN_CPU_CAPABILITY=avx2 set before torch
# starts. Those bits do not depend on the thread count, but they do on the CPU: an Intel Xeon and
# an AMD Zen differ, and so does a Zen 3 from a Zen 1, 4 or 5 (which agree). Each vendor has a set,
# tests/fixtures/reproducible/<vendor>/, and a CPU class whose bits differ from it a set of its
# own, <vendor>-<class>/; tests/it/reproducible.rs holds tchseq --reproducible bit for bit to one
# of its vendor's sets. The pins leave oneDNN, which runs ATen's CPU gelu, at the CPU's own ISA:
# an Intel CPU without AVX-512 computes the set intel-avx2, which an Intel CPU with AVX-512 makes
# with oneDNN held to AVX2 (the manifest records ONEDNN_MAX_CPU_ISA when it is set).
#   bash reference/reproducible_goldens.sh          (writes the set <vendor> of this machine)
#   bash reference/reproducible_goldens.sh zen3     (writes the set <vendor>-zen3)
#   ONEDNN_MAX_CPU_ISA=AVX2 bash reference/reproducible_goldens.sh avx2     (on Intel: intel-avx2)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh
export MKL_CBWR=AVX2,STRICT ATEN_CPU_CAPABILITY=avx2

case "$(grep -m1 '^vendor_id' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')" in
  GenuineIntel) VENDOR=intel ;;
  AuthenticAMD) VENDOR=amd ;;
  *) echo "error: pinned goldens are kept for Intel and AMD CPUs only" >&2; exit 2 ;;
esac
OUT=tests/fixtures/reproducible/$VENDOR${1:+-$1}
FIX=tests/fixtures/models
M=weights/multi30k.en-de
SR=tests/fixtures/bundled/score_reference
rm -rf "$OUT"; mkdir -p "$OUT/bundled"
drop_log() { grep -v -E '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| [A-Z]+ \| ' || true; }

# the bundled model on raw text, and --score-reference in batches of 16
interactive() {
  fairseq-interactive "$M" --path "$M/model.pt" --cpu -s en -t de \
    --tokenizer moses --bpe subword_nmt --bpe-codes "$M/bpecodes" --beam 5 "$@" \
    < tests/fixtures/bundled/input.en | drop_log
}
interactive --nbest 2 --buffer-size 1024 --batch-size 16 > "$OUT/bundled/interactive_nbest2_batch16.txt"
interactive --batch-size 1 > "$OUT/bundled/interactive_batch1.txt"
fairseq-generate "$SR/data-bin" --path "$M/model.pt" --cpu -s en -t de --gen-subset test \
  --score-reference --batch-size 16 | drop_log > "$OUT/bundled/score_reference_batch16.txt"

# every fixture model: three option sets, batched as fairseq-interactive batches them, and the
# tensors of the verify goldens
python - "$OUT" <<'PY'
import json, os, subprocess, sys, tempfile
out = sys.argv[1]
m = json.load(open("tests/fixtures/models/manifest.json"))
jobs, made = [], {}
for fx in m["fixtures"]:
    name, d = fx["name"], fx["dir"]
    os.makedirs(f"{out}/models/{name}", exist_ok=True)
    for set_name in ["beam5", "beam4_lenpen0.6_nbest3", "sampling_topk5"]:
        argv = fx["goldens"]["interactive"][set_name]["batched"]["argv"]
        rel = f"models/{name}/{set_name}.txt"
        jobs.append({"argv": argv, "out": f"{out}/{rel}"})
        made.setdefault(name, {})[set_name] = {"file": rel, "argv": argv}
    with tempfile.TemporaryDirectory() as tmp:
        rows = ",".join(str(r) for r in fx["goldens"]["verify_rows_of_inputs"])
        subprocess.run([sys.executable, "reference/goldens.py", "--data", d, "--path", f"{d}/model.pt",
                        "--out", tmp, "-s", "src", "-t", "tgt", "--sentences", m["inputs"]["src"],
                        m["inputs"]["tgt"], rows], check=True, stdout=subprocess.DEVNULL)
        for side in ("left", "right"):
            os.replace(f"{tmp}/verify_{side}.pt", f"{out}/models/{name}/verify_{side}.pt")
            made[name][f"verify_{side}"] = {"file": f"models/{name}/verify_{side}.pt"}
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(jobs, f)
subprocess.run([sys.executable, "reference/run_cli.py", f.name], check=True)
os.unlink(f.name)
env = {k: os.environ[k] for k in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "ONEDNN_MAX_CPU_ISA")
       if k in os.environ}
info = dict(l.split(":", 1) for l in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines() if ":" in l)
info = {k.strip(): v.strip() for k, v in info.items()}
cpu = {"vendor_id": info.get("vendor_id"), "model_name": info.get("model name"), "cpu_family": info.get("cpu family"),
       "model": info.get("model"), "avx512": sorted(f for f in info.get("flags", "").split() if f.startswith("avx512"))}
json.dump({"environment": env, "cpu": cpu, "fixtures": made}, open(f"{out}/manifest.json", "w"), indent=1)
PY
echo "wrote $OUT"
