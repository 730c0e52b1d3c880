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

.PHONY: up down status test test-unit lint format contracts clean

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv

$(VENV)/.synced: pyproject.toml uv.lock $(MEMBERS) | $(UV)
	$(UV) sync --frozen --python $(PYTHON)
	touch $@

up: $(VENV)/.synced
	$(VENV)/bin/mldiag up

down: $(VENV)/.synced
	$(VENV)/bin/mldiag down

status: $(VENV)/.synced
	$(VENV)/bin/mldiag status

test: $(VENV)/.synced
	$(VENV)/bin/pytest

test-unit: $(VENV)/.synced
	$(VENV)/bin/pytest -m unit

lint: $(VENV)/.synced
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(VENV)/.synced
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

contracts: $(VENV)/.synced
	$(VENV)/bin/python -m mldiag_schemas

clean:
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache
