#!/usr/bin/env bash
# Goldens for `tchseq average` (tests/fixtures/average/): fairseq 0.12.2's
# scripts/average_checkpoints.py (reference/fairseq_average_checkpoints.py, MIT) on the fixture
# checkpoints and three synthetic ones. With a built tchseq, also the live check: tchseq's
# output loaded by torch, equal to the script's tensor for tensor, and loaded by fairseq.
#
#   bash reference/average_goldens.sh                 # goldens, then the live check
#   TCHSEQ=path/to/tchseq bash reference/average_goldens.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source reference/env.sh
TCHSEQ=${TCHSEQ:-${CARGO_TARGET_DIR:-target}/release/tchseq}
if [ -x "$TCHSEQ" ]; then
    python reference/average_goldens.py --check "$TCHSEQ"
else
    echo "no tchseq at $TCHSEQ: goldens only (build it for the live check)" >&2
    python reference/average_goldens.py
fi
