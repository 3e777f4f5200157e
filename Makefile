# ditto-jupyter: the two commands a newcomer runs are `make lab` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8888
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: lab test lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall whenever the project's metadata changes.
$(VENV)/.installed-user: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed-user

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed-user

## Start JupyterLab on notebooks/ with the extension installed.
lab: $(VENV)/.installed-user
	$(BIN)/jupyter lab --no-browser --port=$(PORT) --notebook-dir=notebooks $(ALLOW_ROOT)

## Lint, type-check and run the whole test suite.
test: $(VENV)/.installed-test
	$(MAKE) lint typecheck pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check ditto_jupyter tests benchmarks
	$(BIN)/ruff format --check ditto_jupyter tests benchmarks
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy --strict ditto_jupyter/worker ditto_jupyter/control ditto_jupyter/backends

## pytest runs the tests and, through nbval, the tutorial notebooks with their outputs.
pytest: $(VENV)/.installed-test
	$(BIN)/python -m pytest tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg

## Run every benchmark side by side with its anchor; tables go to benchmarks/RESULTS.md.
bench: $(VENV)/.installed-bench
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build dist
