#!/usr/bin/env bash
# Regenerates tests/fixtures/text/ from sacremoses, subword-nmt, fastBPE, sentencepiece and
# fairseq 0.12.2's encoder wrappers (see text_goldens.py for what each file holds).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
# fastBPE is not in the reference venv's requirements (it needs a C++ build); install it into a
# scratch target once. Without it bpe.json simply lacks the fastBPE entry and the Rust tests say so.
FASTBPE_DIR="$ROOT/target/fastbpe-py"
if ! python -c "import fastBPE" 2>/dev/null; then
    if [ ! -d "$FASTBPE_DIR/fastbpe-0.1.0.dist-info" ]; then
        python -m pip install --quiet --target "$FASTBPE_DIR" fastBPE==0.1.0 || echo "warning: fastBPE did not install; skipping its goldens" >&2
    fi
    export PYTHONPATH="$FASTBPE_DIR:$PYTHONPATH"
fi
python "$HERE/text_goldens.py" "$@"
