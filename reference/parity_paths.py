"""Where `make parity` reads and writes, shared by reference/parity.py and the job modules
beside it (parity_kinds.py, parity_multilingual.py)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "reference/work/parity"
BUNDLED = "weights/multi30k.en-de"
BUNDLED_INPUT = "tests/fixtures/bundled/input.en"
BUNDLED_SR = "tests/fixtures/bundled/score_reference"
