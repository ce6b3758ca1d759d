#!/usr/bin/env bash
# The wheel as a user installs it (`make wheel-test`, part of `make test`):
#   bash python/wheel_test.sh PROJECT_VENV
# A fresh venv outside the checkout, with no Rust on PATH, gets dist/tchseq-*.whl; the project
# venv's torch is linked in (not downloaded again), and torch's own dependencies are seen through
# a .pth file. Its `tchseq` translates with the bundled model and the README's Python quick start
# runs; each must print what the source build (target/release, the project venv) prints.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
project_venv=${1:?usage: bash python/wheel_test.sh PROJECT_VENV}
wheels=(dist/tchseq-*-cp39-abi3-manylinux_*.whl)
[[ ${#wheels[@]} == 1 && -f ${wheels[0]} ]] || { echo "error: want exactly one dist/tchseq-*.whl (make wheel), found: ${wheels[*]}" >&2; exit 2; }
wheel=$repo/${wheels[0]}
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
"$project_venv/bin/python" -m venv "$fresh/venv"
site() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
fresh_site=$(site "$fresh/venv")
project_site=$(site "$project_venv")
"$fresh/venv/bin/python" -m pip install --quiet --no-deps --no-index "$wheel"
ln -s "$project_site/torch" "$fresh_site/torch"
# after the install, so that pip never sees the project venv's own tchseq
echo "$project_site" > "$fresh_site/zz-torch-dependencies.pth"

clean_env=(env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8)
# numeric pins (`MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 make test`) hold on both sides of each
# comparison: the source build below inherits them
for pin in MKL_CBWR ATEN_CPU_CAPABILITY TCHSEQ_CPU_FEATURES_OFF; do
  if [[ -n ${!pin:-} ]]; then clean_env+=("$pin=${!pin}"); fi
done
if "${clean_env[@]}" bash -c 'command -v cargo || command -v rustc' >/dev/null; then
  echo "error: the clean environment still has a Rust toolchain on PATH" >&2
  exit 1
fi
sentences=("A man in a blue shirt is riding a bike." "Two dogs are playing in the snow." "A little girl is eating an ice cream.")
model=$repo/weights/multi30k.en-de
cd "$fresh"

found_by=$("${clean_env[@]}" "$fresh/venv/bin/tchseq" doctor --json | "$fresh/venv/bin/python" -c "import json, sys; print(json.load(sys.stdin)['libtorch_found_by'])")
[[ $found_by == "the virtualenv the binary is installed in"* ]] || { echo "error: the wheel's tchseq found libtorch in $found_by, not in its venv" >&2; exit 1; }
ours=$("${clean_env[@]}" "$fresh/venv/bin/tchseq" --threads 1 translate -m "$model" "${sentences[@]}")
want=$("$repo/target/release/tchseq" --threads 1 translate -m "$model" "${sentences[@]}")
[[ "$ours" == "$want" ]] || { echo "error: the wheel's tchseq translates differently:"$'\n'"$ours"$'\n'"source build:"$'\n'"$want" >&2; exit 1; }

# release builds carry no test faults (the test-faults feature): the variables that make a test
# build panic on a word change nothing here, in the wheel's command, its Python package or
# target/release
faults=(TCHSEQ_TEST_PANIC_ON=dog TCHSEQ_TEST_STOP_WORKER_ON=dog)
dog="The dog runs on the grass."
plain=$("${clean_env[@]}" "$fresh/venv/bin/tchseq" --threads 1 translate -m "$model" "$dog")
for run in "$fresh/venv/bin/tchseq" "$repo/target/release/tchseq"; do
  faulted=$("${clean_env[@]}" "${faults[@]}" "$run" --threads 1 translate -m "$model" "$dog") \
    || { echo "error: $run carries the test faults (built with --features test-faults)" >&2; exit 1; }
  [[ "$faulted" == "$plain" ]] || { echo "error: $run translates differently under ${faults[*]}" >&2; exit 1; }
done
faulted=$("${clean_env[@]}" "${faults[@]}" "$fresh/venv/bin/python" -c "import tchseq, sys; print(tchseq.Translator(sys.argv[1], threads=1).translate([sys.argv[2]]))" "$model" "$dog") \
  || { echo "error: the wheel's Python package carries the test faults" >&2; exit 1; }
[[ $faulted == *"$plain"* ]] || { echo "error: the wheel's Python package translates differently under ${faults[*]}: $faulted" >&2; exit 1; }

quick_start="
import tchseq, sys
t = tchseq.Translator(sys.argv[1], threads=1)
print(tchseq.__file__)
print(t.translate(['Two dogs are playing in the snow.']))
r = t.translate_batch(['Two dogs are playing in the snow.'], beam_size=5, num_hypotheses=2)
print(r[0].texts, r[0].scores)
print(t.score_batch(['A dog runs.'], ['Ein Hund rennt.'])[0].log_probs)
"
# a user's `import tchseq` prints nothing without NumPy (torch warns when it is missing; it is
# kept out here, as the project venv may have it)
import_says=$("${clean_env[@]}" "$fresh/venv/bin/python" -c "import sys; sys.modules['numpy'] = None; import tchseq" 2>&1) || { echo "error: import tchseq failed:"$'\n'"$import_says" >&2; exit 1; }
[[ -z $import_says ]] || { echo "error: import tchseq printed:"$'\n'"$import_says" >&2; exit 1; }
ours=$("${clean_env[@]}" "$fresh/venv/bin/python" -c "$quick_start" "$model")
want=$("$project_venv/bin/python" -c "$quick_start" "$model")
[[ "$(head -1 <<< "$ours")" == "$fresh_site"/tchseq/* ]] || { echo "error: the fresh venv imported tchseq from $(head -1 <<< "$ours")" >&2; exit 1; }
[[ "$(tail -n +2 <<< "$ours")" == "$(tail -n +2 <<< "$want")" ]] || { echo "error: the wheel's Python package prints differently:"$'\n'"$ours"$'\n'"source build:"$'\n'"$want" >&2; exit 1; }
echo "wheel-test: $(basename "$wheel") installed in a fresh venv without Rust: tchseq (libtorch found in its venv) and the Python quick start print the source build's output, and carry no test faults"
