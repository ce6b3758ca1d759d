# tchseq build tooling. `make` provisions libtorch (torch==2.13.0 from PyPI) into a project-local
# virtualenv when it is missing, then builds against it. No system-wide installs.

SHELL := /bin/bash
PYTHON ?= python3

# Use an already active virtualenv when it has torch 2.13.0; else the project-local .venv.
# The version is read from the package metadata: a slim install cannot `import torch`.
TORCH_IS_2_13 := import importlib.metadata as m, sys; sys.exit(0 if m.version('torch').split('+')[0] == '2.13.0' else 1)
TORCH_DIR := import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('torch').origin))
ACTIVE_TORCH_OK := $(shell [ -n "$$VIRTUAL_ENV" ] && "$$VIRTUAL_ENV/bin/python" -c "$(TORCH_IS_2_13)" >/dev/null 2>&1 && echo yes)
ifeq ($(ACTIVE_TORCH_OK),yes)
VENV := $(VIRTUAL_ENV)
export LIBTORCH := $(shell "$$VIRTUAL_ENV/bin/python" -c "$(TORCH_DIR)")
else
VENV := $(CURDIR)/.venv
endif
# .venv/libtorch -> the venv's torch package (a relative link, so the checkout can move);
# .cargo/config.toml points LIBTORCH there.
VENV_STAMP := $(CURDIR)/.venv/libtorch
# What a CPU run needs (1.2 GB): libtorch_cpu needs the CUDA runtime and CUPTI libraries even
# on a CPU. The full wheel (4.7 GB, what `import torch`, fairseq and the Python package need)
# is added by $(FULL_STAMP) for the tests, the reference and the benchmark.
SLIM_INSTALL := --no-deps torch==2.13.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
FULL_STAMP := $(VENV)/.full-torch-ok
CARGO ?= cargo
# The CPU's flags that build.rs turns into the kernel tests' cfg: a target/ made on another CPU
# is rebuilt rather than kept with the other CPU's ignored tests.
export TCHSEQ_BUILD_CPU_FLAGS := $(shell sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 | tr ' ' '\n' \
	| grep -xE 'avx2|fma|avx512f|avx512_vnni|avx512_bf16' | sort | tr '\n' ' ')

.PHONY: all build full-venv test fonts mutants mutants-sample drift demo bench bench-serve browser wheel wheel-test python python-test ray-test parity reference reference-venv fuzz venv clean doc \
	torch-2.11-venv build-torch-2.11 test-torch-2.11 gpu-dry-run gpu-bundle

all: build

venv: $(VENV_STAMP)

$(CURDIR)/.venv/libtorch:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python >= 3.9 with venv and pip, then run make again" >&2; exit 2; }
	@[ -x "$(VENV)/bin/python" ] || $(PYTHON) -m venv "$(VENV)"
	@"$(VENV)/bin/python" -c "$(TORCH_IS_2_13)" 2>/dev/null \
		|| "$(VENV)/bin/python" -m pip install --quiet $(SLIM_INSTALL)
	@mkdir -p "$(CURDIR)/.venv"
	ln -sfn "$$("$(VENV)/bin/python" -c "import importlib.util, os; print(os.path.relpath(os.path.dirname(importlib.util.find_spec('torch').origin), '$(CURDIR)/.venv'))")" $@

# torch's own dependencies (CUDA libraries, sympy, ...) on top of the slim install.
full-venv: $(FULL_STAMP)
$(FULL_STAMP): $(VENV_STAMP)
	"$(VENV)/bin/python" -m pip install --quiet torch==2.13.0
	touch $@

build: $(VENV_STAMP)
	$(CARGO) build --release

# The Rust suites' flags: tests inject faults (src/hub/fault.rs) only in a build with test-faults,
# which `make test` rebuilds without right after, so that target/release and the wheel never carry
# them (python/wheel_test.sh checks the wheel).
CARGO_TEST_FLAGS := --release --features test-faults
export TCHSEQ_CARGO_TEST_FLAGS := $(CARGO_TEST_FLAGS)

# Every test: the Rust suites (portable: goldens within tolerance, bits in reproducible mode),
# then fairseq 0.12.2 live beside tchseq on this machine (make parity), in the default mode at one
# thread and in the reproducible mode at two.
test: $(FULL_STAMP) browser fonts
	@mkdir -p target
	set -o pipefail; $(CARGO) test $(CARGO_TEST_FLAGS) 2>&1 | tee target/cargo-test.log
	@awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($$i ~ /^ignored/) n += $$(i-1) } END { printf "cargo test: %d ignored\n", n }' target/cargo-test.log
	@grep -E '^test .* \.\.\. ignored' target/cargo-test.log | sed 's/^test /  ignored here: /' || true
	$(MAKE) mutants-sample
	$(CARGO) build --release
	$(MAKE) python-test
	$(MAKE) wheel-test
	$(MAKE) parity
	$(MAKE) parity PARITY_ARGS="--reproducible --threads 2 --only '$(REPRODUCIBLE_PARITY)'"

# The reproducible mode's live check at two threads: the bundled model and the batched runs of
# every fixture (the one-line-per-batch runs take fairseq minutes more under MKL's strict mode).
REPRODUCIBLE_PARITY := ^bundled/|/(beam5|beam4_lenpen0.6_nbest3|sampling_topk5|score_reference.b16)\Z|^multilingual/.*nbest2_batch16\Z

# The web page's test drives headless Chromium: Debian's `chromium`, installed with apt when missing.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
		|| [ -n "$$TCHSEQ_CHROMIUM" ] \
		|| { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
			&& { apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } \
		|| { echo "error: the browser test needs Chromium: install Debian's chromium (apt install chromium) or set TCHSEQ_CHROMIUM" >&2; exit 2; }

# The attention PNG's labels need a TrueType font: Debian's fonts-dejavu-core, installed with apt
# when no font the renderer looks for is there.
fonts:
	@for f in /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf /usr/share/fonts/TTF/DejaVuSans.ttf /usr/share/fonts/dejavu/DejaVuSans.ttf \
		/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf; do [ -f "$$f" ] && exit 0; done; \
		{ command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
			&& { apt-get install -y -q fonts-dejavu-core >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q fonts-dejavu-core >/dev/null; }; }; } \
		|| { echo "error: the attention PNG test needs a TrueType font: install fonts-dejavu-core" >&2; exit 2; }

# Hand-made mutants of src/, each of which some test must fail (tests/mutants.py; docs/testing.md).
# Each mutant's `cargo test` takes the suites' flags (TCHSEQ_CARGO_TEST_FLAGS, above).
mutants: $(VENV_STAMP)
	$(PYTHON) tests/mutants.py

# Three of them, picked by the commit (a fixed seed outside a git checkout): every commit tests
# another three, and the same commit the same three.
MUTANTS_SEED = $(shell git rev-parse HEAD 2>/dev/null || echo tchseq-mutants)
mutants-sample: $(VENV_STAMP)
	$(PYTHON) tests/mutants.py --sample 3 --seed $(MUTANTS_SEED)

# How far results move from the goldens under other kernels (tests/drift.sh; docs/testing.md).
drift: build
	bash tests/drift.sh

# The wheel (dist/): the Python package and the `tchseq` command (the stripped launcher and
# tchseq-core, in its scripts), for torch==2.13.*; python/check_wheel.py checks what its binaries
# need, as auditwheel would.
wheel: build $(FULL_STAMP)
	@"$(VENV)/bin/python" -c "import maturin, pytest" 2>/dev/null || "$(VENV)/bin/python" -m pip install --quiet "maturin>=1.5,<2" pytest
	rm -rf python/tchseq.data dist && mkdir -p python/tchseq.data/scripts
	strip -o python/tchseq.data/scripts/tchseq target/release/tchseq
	strip -o python/tchseq.data/scripts/tchseq-core target/release/tchseq-core
	PATH="$(VENV)/bin:$$PATH" "$(VENV)/bin/maturin" build --release --quiet -m python/Cargo.toml --out dist --target-dir target/maturin
	"$(VENV)/bin/python" python/check_wheel.py dist/tchseq-*.whl

# The Python package, installed from the wheel into the venv beside torch 2.13.0.
python: wheel
	"$(VENV)/bin/python" -m pip install --quiet --no-deps --force-reinstall dist/tchseq-*.whl

# The wheel in a fresh venv without Rust, beside the project's torch (python/wheel_test.sh).
wheel-test: wheel
	bash python/wheel_test.sh "$(VENV)"

# pytest without third-party plugins (fairseq's hydra registers one that breaks on Python 3.11)
python-test: python build
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$(VENV)/bin/python" -m pytest -q -p no:cacheprovider python/tests

# The Ray Data example (examples/ray/) in local mode, in its own venv (.venv-ray: ray[data]) that
# sees the project venv's torch and tchseq through a .pth file. Not part of `make test` (Ray is
# large and slow to start on 2 cores).
RAY_VENV := $(CURDIR)/.venv-ray
$(RAY_VENV)/.ok: $(FULL_STAMP)
	@[ -x "$(RAY_VENV)/bin/python" ] || $(PYTHON) -m venv "$(RAY_VENV)"
	"$(VENV)/bin/python" -c "import site; print(site.getsitepackages()[0])" \
		> "$$("$(RAY_VENV)/bin/python" -c "import site; print(site.getsitepackages()[0])")/tchseq-project.pth"
	"$(RAY_VENV)/bin/python" -m pip install --quiet "ray[data]==2.60.0" pytest
	touch $@

ray-test: python build $(RAY_VENV)/.ok
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$(RAY_VENV)/bin/python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning python/tests_ray

demo: build
	@printf '%s\n' "A man in a blue shirt is riding a bike." "Two dogs are playing in the snow." "A little girl is eating an ice cream." \
		| ./target/release/tchseq translate -m weights/multi30k.en-de

# --- Python ground truth (fairseq 0.12.2 + the fixes in reference/sitecustomize.py) ----------
reference-venv: $(VENV)/.reference-ok

$(VENV)/.reference-ok: $(FULL_STAMP) reference/requirements.txt
	"$(VENV)/bin/python" -m pip install --quiet -c reference/constraints.txt -r reference/requirements.txt
	# fairseq pulls in a torchaudio built for another torch; it is not needed.
	"$(VENV)/bin/python" -m pip uninstall --quiet -y torchaudio || true
	touch $@

reference: reference-venv
	bash reference/make_all.sh

bench: reference-venv build
	bash bench/run.sh

# tchseq serve under 1, 8 and 64 concurrent clients beside `translate`; writes bench/serve-results.md.
bench-serve: build
	$(PYTHON) bench/serve.py $(BENCH_SERVE_ARGS)

# fairseq 0.12.2 and tchseq live on this machine: every differing line is reported, 0 expected.
# PARITY_ARGS="--threads 2" or "--reproducible" pass through.
parity: reference-venv build
	bash reference/parity.sh $(PARITY_ARGS)

fuzz:
	cd fuzz && $(CARGO) fuzz build

doc:
	$(CARGO) doc --no-deps

clean:
	$(CARGO) clean

# A build for another libtorch release: builds/torch-2.11/Cargo.toml is this manifest with tch
# 0.24.0 (the release for torch 2.11, what the GPU machines have), built against the
# torch==2.11.0 wheel in its own venv and target directory. The default build stays on 2.13.
TORCH_211_VENV := $(CURDIR)/.venv-2.11
TORCH_211_TARGET := $(CURDIR)/target/torch-2.11
TORCH_211_ENV = LIBTORCH="$$("$(TORCH_211_VENV)/bin/python" -c "$(TORCH_DIR)")" CARGO_TARGET_DIR="$(TORCH_211_TARGET)"

torch-2.11-venv: $(TORCH_211_VENV)/.full-torch-ok
$(TORCH_211_VENV)/.full-torch-ok:
	@[ -x "$(TORCH_211_VENV)/bin/python" ] || $(PYTHON) -m venv "$(TORCH_211_VENV)"
	"$(TORCH_211_VENV)/bin/python" -m pip install --quiet torch==2.11.0
	touch $@

# target/torch-2.11/dist/bin: tchseq and tchseq-core, stripped (what travels to a GPU machine).
build-torch-2.11: torch-2.11-venv
	cd builds/torch-2.11 && $(TORCH_211_ENV) $(CARGO) build --release
	mkdir -p "$(TORCH_211_TARGET)/dist/bin"
	strip -o "$(TORCH_211_TARGET)/dist/bin/tchseq-core" "$(TORCH_211_TARGET)/release/tchseq-core"
	strip -o "$(TORCH_211_TARGET)/dist/bin/tchseq" "$(TORCH_211_TARGET)/release/tchseq"

# The Rust suite on the 2.11 build (CPU).
test-torch-2.11: torch-2.11-venv
	cd builds/torch-2.11 && $(TORCH_211_ENV) $(CARGO) test $(CARGO_TEST_FLAGS)

# gpu/check.sh run here on the CPU with the 2.11 build, as the GPU machine runs it (docs/gpu.md);
# fairseq comes from a Python 3.11 bundle made as gpu-bundle makes the GPU machines' one.
gpu-dry-run: build-torch-2.11
	bash gpu/fairseq.sh target/gpu-dry-run-pylib 3.11
	rm -rf target/gpu-dry-run
	bash gpu/check.sh target/gpu-dry-run --device cpu --tchseq "$(TORCH_211_TARGET)/dist/bin/tchseq" \
		--libtorch "$$("$(TORCH_211_VENV)/bin/python" -c "$(TORCH_DIR)")" --python "$(VENV)/bin/python" \
		--pylib target/gpu-dry-run-pylib

# What a GPU machine needs beside the working tree (both ignored, both carried): gpu/bin, the
# stripped 2.11 build, and gpu/pylib, fairseq 0.12.2 for its Python 3.12 (gpu/fairseq.sh).
gpu-bundle: build-torch-2.11
	mkdir -p gpu/bin && cp "$(TORCH_211_TARGET)/dist/bin/tchseq" "$(TORCH_211_TARGET)/dist/bin/tchseq-core" gpu/bin/
	bash gpu/fairseq.sh gpu/pylib 3.12
