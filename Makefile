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
# Records that Debian's `postgresql` (the server tests/control/test_store_postgres.py starts) was
# installed. Outside .venv on purpose: `make clean` does not uninstall system packages.
POSTGRESQL_STAMP := .make/postgresql.installed
# Debian's chromium, the browser of tests/browser/ (Playwright's own download cannot run here).
CHROMIUM_STAMP := .make/chromium.installed
# Debian's Ceph RADOS Gateway with a monitor and an OSD: the real S3 server that
# tests/support/ceph_gateway.py starts for the object-store tests and bench_scale_out.
RADOSGW_STAMP := .make/radosgw.installed
# JupyterHub from PyPI (into the venv) and its proxy from npm (into a git-ignored folder):
# the real hub of tests/server/test_jupyterhub_nodes.py (tests/support/jupyterhub.py).
JUPYTERHUB_STAMP := $(VENV)/.installed-jupyterhub
HUB_PROXY_DIR := .make/hub-proxy
HUB_PROXY_STAMP := .make/hub-proxy.installed
# apt-get waits this long for another apt or dpkg to let go of its lock.
APT_GET := env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
# `apt-get update` does not wait for the package lists' own lock (the timeout above is
# dpkg's): while another apt holds it, try again every 5 s, for up to 10 minutes.
APT_UPDATE := for try in $$(seq 120); do $(AS_ROOT) $(APT_GET) update && break; \
	[ $$try -lt 120 ] || exit 1; echo "make: apt-get update failed (try $$try); again in 5 s" >&2; sleep 5; done

# The JupyterLab extension (the Runtimes panel): node packages from the committed yarn.lock
# (CI=true makes Yarn refuse to change it), built into ditto_jupyter/labextension.
LABEXT := labextension
JLPM := $(abspath $(BIN))/jlpm
NODE_STAMP := .make/labextension-node.installed
LABEXT_BUILT := ditto_jupyter/labextension/package.json
LABEXT_SOURCES := $(shell find $(LABEXT)/src $(LABEXT)/style $(LABEXT)/schema -type f 2>/dev/null) \
	$(LABEXT)/package.json $(LABEXT)/tsconfig.json
LABEXT_LINKED := $(VENV)/.labextension-linked

.PHONY: lab test test-fast lint typecheck jstest pytest pytest-fast postgresql chromium radosgw jupyterhub labextension screenshots bench clean

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

## Start JupyterLab on notebooks/ with the extensions installed (server and Runtimes panel).
lab: $(VENV)/.installed-user $(LABEXT_LINKED)
	$(BIN)/jupyter lab --no-browser --port=$(PORT) --notebook-dir=notebooks $(ALLOW_ROOT)

## Lint, type-check and run the whole test suite (Python, front-end units, the browser).
test: $(VENV)/.installed-test
	$(MAKE) lint typecheck jstest pytest

## The fast tier: lint, type-check, jest and the pytest tests that need no apt package, no
## browser and no long multi-kernel run (docs/development.md). A few minutes.
test-fast: $(VENV)/.installed-test
	$(MAKE) lint typecheck jstest pytest-fast

## Install the lab extension's node packages (once per change of package.json or yarn.lock).
$(NODE_STAMP): $(LABEXT)/package.json $(LABEXT)/yarn.lock | $(VENV)/.installed-user
	cd $(LABEXT) && $(JLPM) install --immutable
	mkdir -p $(@D)
	touch $@

## Build the lab extension into ditto_jupyter/labextension (when a source changed).
labextension: $(LABEXT_BUILT)

$(LABEXT_BUILT): $(NODE_STAMP) $(LABEXT_SOURCES)
	cd $(LABEXT) && PATH="$(abspath $(BIN)):$$PATH" $(JLPM) build:prod
	touch $@

# An editable install does not copy the extension into the environment: link it there.
# (JupyterLab hands `develop` to the jupyter-builder command, found on PATH: the venv's.)
$(LABEXT_LINKED): $(LABEXT_BUILT) | $(VENV)/.installed-user
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter labextension develop --overwrite .
	touch $@

## The lab extension's unit tests under jest (tree layout, windowing, timelines, runtime events).
jstest: $(NODE_STAMP)
	cd $(LABEXT) && $(JLPM) test

## ruff and the import layers (Python); eslint and prettier (the lab extension).
lint: $(VENV)/.installed-test $(NODE_STAMP)
	$(BIN)/ruff check ditto_jupyter tests benchmarks
	$(BIN)/ruff format --check ditto_jupyter tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python tests/house/import_cycles.py ditto_jupyter
	cd $(LABEXT) && $(JLPM) lint

## mypy --strict on the package; tsc on the lab extension and its tests.
typecheck: $(VENV)/.installed-test $(NODE_STAMP)
	$(BIN)/mypy --strict ditto_jupyter
	cd $(LABEXT) && $(JLPM) typecheck

## Install the PostgreSQL server the PostgreSQL store suite runs on (once; Debian/apt).
postgresql: $(POSTGRESQL_STAMP)

$(POSTGRESQL_STAMP):
	@command -v apt-get >/dev/null || { echo "make: the PostgreSQL tests need Debian's postgresql package, and apt-get is missing" >&2; exit 1; }
	$(APT_UPDATE)
	$(AS_ROOT) $(APT_GET) install -y postgresql
	mkdir -p $(@D)
	touch $@

## Install Debian's chromium for the browser tests (once; Debian/apt).
chromium: $(CHROMIUM_STAMP)

$(CHROMIUM_STAMP):
	@command -v apt-get >/dev/null || { echo "make: the browser tests need Debian's chromium package, and apt-get is missing" >&2; exit 1; }
	$(APT_UPDATE)
	$(AS_ROOT) $(APT_GET) install -y chromium
	mkdir -p $(@D)
	touch $@

## Install Ceph's RADOS Gateway, monitor and OSD (once; Debian/apt): the S3 server of the tests.
radosgw: $(RADOSGW_STAMP)

$(RADOSGW_STAMP):
	@command -v apt-get >/dev/null || { echo "make: the object-store tests need Debian's radosgw, ceph-mon and ceph-osd packages, and apt-get is missing" >&2; exit 1; }
	$(APT_UPDATE)
	$(AS_ROOT) $(APT_GET) install -y radosgw
	$(AS_ROOT) $(APT_GET) install -y --no-install-recommends ceph-mon ceph-osd
	mkdir -p $(@D)
	touch $@

## Install JupyterHub (PyPI, into the venv) and its proxy (npm) for the hub test (once).
jupyterhub: $(JUPYTERHUB_STAMP) $(HUB_PROXY_STAMP)

$(JUPYTERHUB_STAMP): pyproject.toml | $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet jupyterhub
	touch $@

$(HUB_PROXY_STAMP):
	@command -v npm >/dev/null || { echo "make: the JupyterHub test needs npm for configurable-http-proxy" >&2; exit 1; }
	mkdir -p $(HUB_PROXY_DIR)
	npm install --no-audit --no-fund --prefix $(HUB_PROXY_DIR) configurable-http-proxy
	touch $@

## pytest runs the tests and, through nbval, the tutorial notebooks with their outputs.
## The extension is linked into the venv as `make lab` does (tests/house/test_lab_install.py).
pytest: $(VENV)/.installed-test $(POSTGRESQL_STAMP) $(CHROMIUM_STAMP) $(RADOSGW_STAMP) $(LABEXT_LINKED) \
		$(JUPYTERHUB_STAMP) $(HUB_PROXY_STAMP)
	$(BIN)/python -m pytest tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg \
		--durations=30

# What the fast tier leaves out (the markers are declared in pyproject.toml).
FAST_MARKERS := not slow and not postgres and not s3 and not browser and not labextension

## The pytest tests of the fast tier: no PostgreSQL, gateway, chromium, built extension or slow test.
pytest-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest tests -m "$(FAST_MARKERS)"

## Refresh the panel's screenshots in docs/images/ (the browser test, told to keep them).
screenshots: $(VENV)/.installed-test $(CHROMIUM_STAMP) $(LABEXT_BUILT)
	DITTO_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/browser/test_panel.py tests/browser/test_notebook_checkpoints.py

## Run every benchmark side by side with its anchor; tables go to benchmarks/RESULTS.md.
bench: $(VENV)/.installed-bench $(RADOSGW_STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build dist
