# Every target creates .venv and installs into it when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test render demo typecheck seed clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q
	$(BIN)/mypy
	$(BIN)/findings render --check

render: $(STAMP)
	$(BIN)/findings render

typecheck: $(STAMP)
	$(BIN)/mypy

# For now the demo renders the committed store into build/ and prints the
# conclusions; the benchmark runner issue makes it measure end to end.
demo: $(STAMP)
	$(BIN)/findings render --output build/eagle-fast-verify.md
	$(BIN)/findings conclusions

# Rebuild the committed seed store from benchmarks/history/ (into an empty store).
seed: $(STAMP)
	$(BIN)/findings ingest table benchmarks/history/measurements.csv \
		--configs benchmarks/history/configs.csv \
		--environment benchmarks/history/environment.toml

clean:
	rm -rf build .pytest_cache .mypy_cache
