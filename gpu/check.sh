#!/usr/bin/env bash
# The prepared GPU check: `bash gpu/check.sh OUT [--device cuda|cpu] [...]` (docs/gpu.md).
# Runs gpu/check.py with --python's Python, else the GPU machines' (/opt/torch/.venv, PyTorch
# 2.11) when it is there, else python3; every option passes through.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bash gpu/check.sh OUT [--device cuda|cpu] [--tchseq BIN] [--libtorch DIR] [--python PY]" >&2
  exit 2
fi
python=""
args=("$@")
for ((i = 0; i < ${#args[@]} - 1; i++)); do
  [[ "${args[i]}" == --python ]] && python="${args[i + 1]}"
done
if [[ -z "$python" ]]; then
  if [[ -x /opt/torch/.venv/bin/python ]]; then python=/opt/torch/.venv/bin/python; else python=python3; fi
  args+=(--python "$python")
fi
exec "$python" "$here/check.py" "${args[@]}"
