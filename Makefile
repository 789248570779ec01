# The two commands of the README: `make demo` and `make test`. Both create .venv and install first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU-only machines take the CPU build of torch that lies on disk; with a GPU (nvidia-smi found)
# nothing is pinned and pip resolves the ordinary PyPI build. Override with `make CONSTRAINTS=`.
CONSTRAINTS ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,constraints/cpu.txt)
STAMP := $(VENV)/.installed

.PHONY: install demo test lint format bench clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[test,notebooks]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python -m seqenc.demo

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
