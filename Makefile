# The targets README and CI call. `make demo` and `make test` do all the set-up themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lint typecheck test test-fast bench demo clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: install
	$(VENV)/bin/ruff check agents_celery api tests bench examples
	$(VENV)/bin/ruff format --check agents_celery api tests bench examples

typecheck: install
	$(VENV)/bin/mypy

# The whole suite, slow crash tests included (CI runs exactly this). Starts a Redis if none answers.
test: install
	PY=$(PY) scripts/ensure-redis
	$(PY) -m pytest

# Everything but the slow crash tests, for quick local loops.
test-fast: install
	PY=$(PY) scripts/ensure-redis
	$(PY) -m pytest -m "not slow"

bench: install
	PY=$(PY) scripts/ensure-redis
	$(PY) -m bench

demo: install
	$(PY) -m agents_celery.cli demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
