# ditto-jupyter: the two commands a newcomer runs are `make lab` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8888
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

# Root installs system packages; anyone else goes through sudo.
AS_ROOT := $(if $(filter 0,$(shell id -u)),,sudo)
# Records that Debian's `postgresql` (the server tests/test_store_postgres.py starts) was
# installed. Outside .venv on purpose: `make clean` does not uninstall system packages.
POSTGRESQL_STAMP := .make/postgresql.installed

.PHONY: lab test lint typecheck pytest postgresql bench clean

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
	$(BIN)/mypy --strict ditto_jupyter

## Install the PostgreSQL server the PostgreSQL store suite runs on (once; Debian/apt).
postgresql: $(POSTGRESQL_STAMP)

$(POSTGRESQL_STAMP):
	@command -v apt-get >/dev/null || { echo "make: the PostgreSQL tests need Debian's postgresql package, and apt-get is missing" >&2; exit 1; }
	$(AS_ROOT) env DEBIAN_FRONTEND=noninteractive apt-get update
	$(AS_ROOT) env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
	mkdir -p $(@D)
	touch $@

## pytest runs the tests and, through nbval, the tutorial notebooks with their outputs.
pytest: $(VENV)/.installed-test $(POSTGRESQL_STAMP)
	$(BIN)/python -m pytest tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg

## Run every benchmark side by side with its anchor; tables go to benchmarks/RESULTS.md.
bench: $(VENV)/.installed-bench
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build dist
