#!/usr/bin/env bash
# `make parity`: fairseq 0.12.2 (the reference venv) and tchseq, live on this machine, must print
# identical lines. Arguments go to reference/parity.py (--threads N, --reproducible, --only REGEX).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh
exec python reference/parity.py "$@"
