# The README's two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit browser-deps fault-deps js-deps bench clean install

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m app serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict app benchmarks

# Browser tests drive Debian's Chromium; install it when missing (never a downloaded browser).
browser-deps:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# Fault tests (tests/faults/) run Debian's PgBouncer in front of a private cluster; install
# it when missing. The tests start their own on free ports, never the package's service.
fault-deps:
	@test -x /usr/sbin/pgbouncer || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null)

# The official LangGraph JS SDK and its React hook, pinned in tests/js/package-lock.json, for
# tests/integration/test_lg_js_sdk.py. node and npm come from the machine (Debian: nodejs, npm).
JS_STAMP := tests/js/node_modules/.installed

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		echo "node and npm are needed for the JS SDK tests: install them (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

js-deps: $(JS_STAMP)

unit: $(STAMP)
	$(VENV)/bin/pytest tests

test: lint typecheck browser-deps fault-deps js-deps unit

bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache test-output tests/js/node_modules
