# Source this to run fairseq 0.12.2 from the project venv with the fixes it needs today.
REF_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$REF_DIR/.." && pwd)"
export PATH="$ROOT/.venv/bin:$PATH"
export PYTHONPATH="$REF_DIR${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
export PYTHONHASHSEED=0
