#!/usr/bin/env bash
# fairseq 0.12.2 for a machine without network (the GPU machines): writes DIR (default gpu/pylib)
#   wheels/      what fairseq-interactive needs that the GPU machines' image lacks, for Python
#                PYVER (default 3.12): hydra-core 1.0.7, omegaconf 2.0.6, antlr4-python3-runtime
#                4.8 (built here: PyPI has its source only), bitarray, and the bundled model's
#                tokenizer and BPE: sacremoses (with click and joblib) and subword-nmt (with mock);
#   fairseq.tgz  fairseq's own Python sources from its PyPI sdist, without its examples/, with the
#                Cython sources gpu/check.py compiles there (numpy, Cython and a C++ compiler are
#                in the image).
# The GPU machines' image has torch 2.11, numpy, Cython, regex, sacrebleu, PyYAML and tqdm (see
# docs/gpu.md); gpu/check.py installs DIR into its output folder and runs fairseq from there.
# Usage: bash gpu/fairseq.sh [DIR] [PYVER]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="${1:-gpu/pylib}"
pyver="${2:-3.12}"
python=".venv/bin/python"
rm -rf "$dir" && mkdir -p "$dir/wheels"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" -d "$dir/wheels" hydra-core==1.0.7 omegaconf==2.0.6 bitarray==3.12.3 \
  sacremoses==0.1.1 click==8.5.1 joblib==1.6.0 subword-nmt==0.3.8 mock==5.2.0
"$python" -m pip wheel --quiet --no-deps -w "$dir/wheels" antlr4-python3-runtime==4.8
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# --no-build-isolation: fairseq's setup.py imports torch, which the project venv has
"$python" -m pip download --quiet --no-deps --no-build-isolation --no-binary :all: -d "$work" fairseq==0.12.2
tar -xzf "$work"/fairseq-0.12.2.tar.gz -C "$work"
tar -czf "$dir/fairseq.tgz" -C "$work/fairseq-0.12.2" --exclude fairseq/examples --exclude '__pycache__' fairseq fairseq_cli
du -sh "$dir"
