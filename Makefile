# tchseq build tooling. `make` provisions libtorch (torch==2.13.0 from PyPI) into a project-local
# virtualenv when it is missing, then builds against it. No system-wide installs.

SHELL := /bin/bash
PYTHON ?= python3

# Use an already active virtualenv when it has torch 2.13.0; else the project-local .venv.
ACTIVE_TORCH_OK := $(shell [ -n "$$VIRTUAL_ENV" ] && "$$VIRTUAL_ENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='2.13.0' else 1)" >/dev/null 2>&1 && echo yes)
ifeq ($(ACTIVE_TORCH_OK),yes)
VENV := $(VIRTUAL_ENV)
export LIBTORCH := $(shell "$$VIRTUAL_ENV/bin/python" -c "import torch,os; print(os.path.dirname(torch.__file__))")
else
VENV := $(CURDIR)/.venv
endif
# .venv/libtorch -> the venv's torch package; .cargo/config.toml points LIBTORCH there.
VENV_STAMP := $(CURDIR)/.venv/libtorch
# CI machines have 2 cores; keep the C++ shim build from oversubscribing.
CARGO ?= cargo

.PHONY: all build test demo bench bench-serve browser python python-test ray-test parity reference reference-venv fuzz venv clean doc

all: build

venv: $(VENV_STAMP)

$(CURDIR)/.venv/libtorch:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python >= 3.9 with venv and pip, then run make again" >&2; exit 2; }
	@[ -x "$(VENV)/bin/python" ] || $(PYTHON) -m venv "$(VENV)"
	@"$(VENV)/bin/python" -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='2.13.0' else 1)" 2>/dev/null \
		|| "$(VENV)/bin/python" -m pip install --quiet torch==2.13.0
	@mkdir -p "$(CURDIR)/.venv"
	ln -sfn "$$("$(VENV)/bin/python" -c "import torch,os; print(os.path.dirname(torch.__file__))")" $@

build: $(VENV_STAMP)
	$(CARGO) build --release

# Every test: the Rust suites (portable: goldens within tolerance, bits in reproducible mode),
# then fairseq 0.12.2 live beside tchseq on this machine (make parity), in the default mode at one
# thread and in the reproducible mode at two.
test: $(VENV_STAMP) browser
	$(CARGO) build --release
	$(CARGO) test --release
	$(MAKE) python-test
	$(MAKE) parity
	$(MAKE) parity PARITY_ARGS="--reproducible --threads 2 --only '$(REPRODUCIBLE_PARITY)'"

# The reproducible mode's live check at two threads: the bundled model and the batched runs of
# every fixture (the one-line-per-batch runs take fairseq minutes more under MKL's strict mode).
REPRODUCIBLE_PARITY := ^bundled/|/(beam5|beam4_lenpen0.6_nbest3|sampling_topk5|score_reference.b16)\Z

# The web page's test drives headless Chromium: Debian's `chromium`, installed with apt when missing.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
		|| [ -n "$$TCHSEQ_CHROMIUM" ] \
		|| { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
			&& { apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } \
		|| { echo "error: the browser test needs Chromium: install Debian's chromium (apt install chromium) or set TCHSEQ_CHROMIUM" >&2; exit 2; }

# The Python package (python/: pyo3 + maturin), installed into the venv beside torch 2.13.0.
python: $(VENV_STAMP)
	@"$(VENV)/bin/python" -c "import maturin, pytest" 2>/dev/null || "$(VENV)/bin/python" -m pip install --quiet "maturin>=1.5,<2" pytest
	PATH="$(VENV)/bin:$$PATH" "$(VENV)/bin/python" -m pip install --quiet --no-build-isolation ./python

# pytest without third-party plugins (fairseq's hydra registers one that breaks on Python 3.11)
python-test: python build
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$(VENV)/bin/python" -m pytest -q -p no:cacheprovider python/tests

# The Ray Data example (examples/ray/) in local mode, in its own venv (.venv-ray: ray[data]) that
# sees the project venv's torch and tchseq through a .pth file. Not part of `make test` (Ray is
# large and slow to start on 2 cores).
RAY_VENV := $(CURDIR)/.venv-ray
$(RAY_VENV)/.ok: $(VENV_STAMP)
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

$(VENV)/.reference-ok: $(VENV_STAMP) reference/requirements.txt
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
