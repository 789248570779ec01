# The two commands of the README: `make demo` and `make test` (ruff, the tests, the documentation
# site with warnings as errors). Both create .venv and install first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU-only machines take the CPU build of torch that lies on disk; with a GPU (nvidia-smi found)
# nothing is pinned and pip resolves the ordinary PyPI build. Override with `make CONSTRAINTS=`.
CONSTRAINTS ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,constraints/cpu.txt)
STAMP := $(VENV)/.installed

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
DEMO := runs/demo

.PHONY: install demo test docs format clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[test,notebooks,docs]'
	touch $(STAMP)

install: $(STAMP)

# Train on the bundled sample (tests the best checkpoint, writes a bundle), export every account's
# embedding to Parquet, and show where everything is.
demo: install
	mkdir -p $(DEMO)
	$(BIN)/seqenc fit --config configs/quickstart.yaml --trainer.enable_progress_bar false | tee $(DEMO)/fit.log
	$(BIN)/seqenc embed --no-progress --model "$$(sed -n 's/^bundle: //p' $(DEMO)/fit.log | tail -1)" \
		--events datasets/sample/events.parquet --output $(DEMO)/embeddings.parquet
	$(BIN)/python -c "import pandas as pd; df = pd.read_parquet('$(DEMO)/embeddings.parquet'); \
		print(df.head().to_string(max_colwidth=60)); print(len(df), 'accounts embedded')"
	@echo "checkpoint, bundle and test metrics: $(DEMO)/fit.log; embeddings: $(DEMO)/embeddings.parquet"

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The documentation site (docs/, mkdocs.yml) served at http://127.0.0.1:8000 while it is edited.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
