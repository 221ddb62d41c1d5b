"""`make fuzz`: schemathesis against a service it starts, once per role, every phase and
every check; exit 1 on any server error or conformance failure (docs/fuzzing.md).

The service is `python -m app serve` (real uvicorn) on a fresh database with the demo shop
and model, rate limits and the token budget off (the fuzzer is one client sending
thousands of requests). Each role's run has a token of its own and dictionaries of ids
that exist (tests/fuzz/seed.py), so path and query values reach real threads, runs,
checkpoints, store items and staff threads part of the time instead of stopping at a 404.

Knobs (environment): FUZZ_EXAMPLES examples per operation and phase (default 20),
FUZZ_BUDGET seconds per role (default: none, one pass; with it, phases repeat until the
budget is spent), FUZZ_SEED, FUZZ_WORKERS (default 1), FUZZ_ROLES (default
customer,guest,staff; `admin` on request: see docs/fuzzing.md), FUZZ_OUT (reports and
the service's log; default a new temp dir).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.fuzz.seed import Seeded, seed_staff, seed_user
from tests.pg import create_fresh_database, drop_database

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
ROOT = Path(__file__).resolve().parents[2]
# Tried beside whatever hypothesis makes up, where ids and text go.
HOSTILE = ["\x00", "a\x00b", "\ud7ff\ue000", "%00", "../../etc/passwd", "' OR 1=1 --", "🦜" * 40]
TEXT = ["where is my order?", "refunds", *HOSTILE]
# A role's user id: the first demo customer, a guest, a member of staff, an admin (staff
# who may change policies, app/identity.py).
GUEST = "guest-fuzz"
STAFF = "staff-fuzz"
ADMIN = "staff-fuzz-admin"
# The user the document's examples name (app/api/openapi_text.py).
EXAMPLE_USER = "james_evans_5777"
# Operations that run the (demo) model: a few examples each are enough.
MODEL_ROUTES = r"/(messages|resume|runs|runs/stream|runs/wait)$"
STREAM_ROUTES = r"/(events|stream)$"


@dataclass
class Settings:
    examples: int
    budget: int | None
    seed: int
    workers: int
    roles: list[str]
    out: Path

    @classmethod
    def from_env(cls) -> Settings:
        budget = os.environ.get("FUZZ_BUDGET")
        out = os.environ.get("FUZZ_OUT") or tempfile.mkdtemp(prefix="cs-agent-fuzz-")
        return cls(
            examples=int(os.environ.get("FUZZ_EXAMPLES", "20")),
            budget=int(budget) if budget else None,
            seed=int(os.environ.get("FUZZ_SEED", "7")),
            workers=int(os.environ.get("FUZZ_WORKERS", "1")),
            roles=os.environ.get("FUZZ_ROLES", "customer,guest,staff").split(","),
            out=Path(out),
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LLM_"))}
    env.update(
        DATABASE_URL=database_url,
        APP_ENV="dev",
        LLM_PROVIDER="demo",
        DEMO_MODEL_TOKENS_PER_S="100000",
        RATE_LIMIT_POSTS_PER_MINUTE="0",
        RATE_LIMIT_THREADS_PER_HOUR="0",
        RATE_LIMIT_PUBLIC_PER_MINUTE="0",
        RATE_LIMIT_AUTH_PER_MINUTE="0",
        TOKEN_BUDGET_PER_DAY="0",
        # Load shedding is off, as the rate limits are: three fuzzers at once on a busy
        # machine drew `503 overloaded` (a server error to schemathesis). The fuzzer tests
        # what input does; admission is tested by tests/unit/test_admission.py,
        # tests/integration/test_admission.py and the capacity bench.
        ADMIT_MAX_TURNS="0",
        WEB_WORKERS="1",
        PYTHONPATH=str(ROOT),
    )
    return env


def start_service(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=out)
    deadline = time.monotonic() + 120  # migrations and the demo shop on a fresh database
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the service exited ({process.returncode}); see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise RuntimeError(f"the service did not become ready; see {log}")


def token(env: dict[str, str], user_id: str, role: str) -> str:
    command = [sys.executable, "-m", "app", "token", user_id, "--role", role, "--ttl", "86400"]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _toml(value: str) -> str:
    # a JSON string is a TOML basic string once non-ASCII stays as it is
    return json.dumps(value, ensure_ascii=False)


def _dictionary(name: str, values: list[str]) -> str:
    unique = list(dict.fromkeys(values)) or ["none"]
    return f"[dictionaries.{name}]\nvalues = [{', '.join(map(_toml, unique))}]\n"


def _bind(name: str, probability: float) -> str:
    return f'{{ dictionary = "{name}", probability = {probability} }}'


def config(seeded: Seeded) -> str:
    """The schemathesis.toml of one role's run: its ids as dictionaries, bound to the
    parameters they fit."""
    lines = [
        _dictionary("session", seeded.sessions),
        _dictionary("lg_thread", seeded.lg_threads or seeded.sessions),
        _dictionary("staff_thread", seeded.staff_threads),
        _dictionary("run", seeded.runs),
        _dictionary("native_session", seeded.sessions[:1]),
        _dictionary("native_run", seeded.native_runs),
        _dictionary("lg_run", seeded.lg_runs),
        _dictionary("lg_checkpoint", seeded.lg_checkpoints),
        _dictionary("checkpoint", [*seeded.checkpoints, *HOSTILE]),
        _dictionary("message", [*seeded.messages, *HOSTILE]),
        _dictionary("text", TEXT),
        _dictionary("namespace", seeded.store_namespaces),
        _dictionary("store_key", seeded.store_keys),
        _dictionary("memory_key", seeded.memory_keys),
        _dictionary("assistant", seeded.assistants),
        _dictionary("article", seeded.articles),
        # a webhook's host is resolved (DNS) before it is accepted: none from the fuzzer
        _dictionary("no_webhook", [""]),
        "[parameters]",
        f'"query.q" = {_bind("text", 0.3)}',
        f'"query.checkpoint_id" = {_bind("checkpoint", 0.5)}',
        f'"query.before" = {_bind("checkpoint", 0.5)}',
        f'"query.namespace" = {_bind("namespace", 0.6)}',
        f'"query.key" = {_bind("store_key", 0.6)}',
        f'"body.key" = {_bind("store_key", 0.5)}',
        f'"body.checkpoint_id" = {_bind("checkpoint", 0.5)}',
        f'"body.message_id" = {_bind("message", 0.5)}',
        f'"body.content" = {_bind("text", 0.3)}',
        f'"body.webhook" = {_bind("no_webhook", 1.0)}',
        f'"path.session_id" = {_bind("session", 0.8)}',
        f'"path.run_id" = {_bind("run", 0.8)}',
        f'"path.checkpoint_id" = {_bind("checkpoint", 0.8)}',
        f'"path.assistant_id" = {_bind("assistant", 0.8)}',
        f'"path.article_id" = {_bind("article", 0.8)}',
        f'"path.key" = {_bind("memory_key", 0.8)}',
        "",
        # a path naming a thread and its run or checkpoint: that thread's own, most of the time
        "[[operations]]",
        f"include-path-regex = {_toml('^/threads/[^/]+/runs/')}",
        "parameters = { "
        f'"path.session_id" = {_bind("native_session", 0.8)}, '
        f'"path.run_id" = {_bind("native_run", 0.8)} }}',
        "",
        "[[operations]]",
        f"include-path-regex = {_toml('^/lg/threads/[^/]+/(runs|state)/')}",
        "parameters = { "
        f'"path.thread_id" = {_bind("lg_thread", 0.8)}, '
        f'"path.run_id" = {_bind("lg_run", 0.8)}, '
        f'"path.checkpoint_id" = {_bind("lg_checkpoint", 0.8)} }}',
        "",
        "[[operations]]",
        f"include-path-regex = {_toml('^/lg/threads/')}",
        f'parameters = {{ "path.thread_id" = {_bind("lg_thread", 0.8)} }}',
        "",
        "[[operations]]",
        f"include-path-regex = {_toml('^/staff/threads/')}",
        f'parameters = {{ "path.thread_id" = {_bind("staff_thread", 0.8)} }}',
        "",
        # a stream stays open while its thread lives: a few seconds of it are enough
        "[[operations]]",
        f"include-path-regex = {_toml(STREAM_ROUTES)}",
        f"include-method = {_toml('GET')}",
        "request-timeout = 3",
        "",
        "[[operations]]",
        f"include-path-regex = {_toml(MODEL_ROUTES)}",
        f"include-method = {_toml('POST')}",
        "generation = { max-examples = 5 }",
        "",
        # A body over the size limit is refused with 413 before it is read: a rejection.
        "[checks.negative_data_rejection]",
        "expected-statuses = ["
        '"400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", '
        '"5xx"]',
        "",
    ]
    return "\n".join(lines)


def _first(values: list[str]) -> str | None:
    return values[0] if values else None


def seeded_examples(document: dict[str, Any], seeded: Seeded, user_id: str) -> dict[str, Any]:
    """The document with the role's own ids as its path examples, so the examples phase
    (and what schemathesis derives from examples) starts on data that exists; the body
    examples name the role's user where they name the documented one."""
    lg = {
        "thread_id": _first(seeded.lg_threads),
        "run_id": _first(seeded.lg_runs),
        "checkpoint_id": _first(seeded.lg_checkpoints),
    }
    native = {"session_id": _first(seeded.sessions), "run_id": _first(seeded.native_runs)}
    staff = {"thread_id": _first(seeded.staff_threads)}
    common = {"key": _first(seeded.memory_keys), "article_id": _first(seeded.articles)}
    for path, operations in document["paths"].items():
        mine = lg if path.startswith("/lg/") else staff if path.startswith("/staff/") else native
        for operation in operations.values():
            for param in operation.get("parameters", []):
                value = {**common, **mine}.get(param["name"]) if param["in"] == "path" else None
                if value is not None:
                    param["example"] = value
    text = json.dumps(document).replace(EXAMPLE_USER, user_id)
    return dict(json.loads(text))


def start_role(
    settings: Settings, url: str, role: str, user_id: str, bearer: str, seeded: Seeded
) -> subprocess.Popen[bytes]:
    """One role's schemathesis run, started; its report and output go to the out dir."""
    work = settings.out / role
    work.mkdir(parents=True, exist_ok=True)
    (work / "schemathesis.toml").write_text(config(seeded))
    document = httpx.get(f"{url}/openapi.json", timeout=30).json()
    (work / "openapi.json").write_text(json.dumps(seeded_examples(document, seeded, user_id)))
    report = work / "report.json"
    command = [
        SCHEMATHESIS,
        "--config-file",
        str(work / "schemathesis.toml"),
        "run",
        str(work / "openapi.json"),
        "--url",
        url,
        "--header",
        f"Authorization: Bearer {bearer}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--seed",
        str(settings.seed),
        "--max-examples",
        str(settings.examples),
        "--workers",
        str(settings.workers),
        "--generation-database",
        "none",
        "--request-timeout",
        "30",
        "--no-color",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    if settings.budget:
        command += ["--max-time", str(settings.budget)]
    with (work / "output.txt").open("w") as out:
        return subprocess.Popen(command, cwd=work, stdout=out, stderr=subprocess.STDOUT)


def finish_role(
    settings: Settings, role: str, run: subprocess.Popen[bytes], started: float
) -> dict[str, Any]:
    """The role's JSON report once its run has ended, with its time and output file."""
    run.wait()
    work = settings.out / role
    report = work / "report.json"
    result: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    result["elapsed_s"] = round(time.monotonic() - started)
    result["output"] = str(work / "output.txt")
    return result


def summary(role: str, result: dict[str, Any]) -> tuple[str, bool]:
    """One line for the role, and whether it passed."""
    if not result.get("operations"):
        return f"{role:9} no report (see {result['output']})", False
    failures = result.get("failures", [])
    errors = result.get("errors", [])
    cases = result["test_cases"]
    by_code = ", ".join(f"{f['code']} {f['title']}: {f['count']}" for f in failures)
    line = (
        f"{role:9} {result['operations']['tested']} operations, {cases['generated']} cases, "
        f"{cases['unique_failures']} unique failures, {sum(e['count'] for e in errors)} "
        f"errors in {result['elapsed_s']} s" + (f"\n          {by_code}" if by_code else "")
    )
    return line, result.get("exit_code") == 0 and not failures and not errors


def _failures_text(output: Path) -> str:
    text = output.read_text(errors="replace")
    start = text.find("=== ERRORS ===")
    if start < 0:
        start = text.find("=== FAILURES ===")
    return text[max(start, 0) :][-30_000:]


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so the service stops and the database is dropped


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_term)
    settings = Settings.from_env()
    settings.out.mkdir(parents=True, exist_ok=True)
    database_url, admin = create_fresh_database("csagent_fuzz")
    env = service_env(database_url)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = settings.out / "service.log"
    service = start_service(env, port, log)
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        customers = httpx.get(f"{url}/auth/demo/customers", timeout=10).json()
        users = {
            "customer": customers[0]["user_id"],
            "guest": GUEST,
            "staff": STAFF,
            "admin": ADMIN,
        }
        tokens = {role: token(env, users[role], role) for role in users}
        seeded = {r: seed_user(url, tokens[r], users[r], r) for r in ("customer", "guest")}
        seeded["staff"] = seed_staff(url, tokens["staff"])
        seeded["admin"] = seeded["staff"]  # the same queue; admins also reach /staff/policies
        # the roles at once, against the one service (as its clients would be): the
        # coverage phase is mostly the fuzzer's own CPU, so this halves the wall time
        started = time.monotonic()
        runs = {
            role: start_role(settings, url, role, users[role], tokens[role], seeded[role])
            for role in settings.roles
        }
        print(f"fuzz: {', '.join(runs)} ...", flush=True)
        while len(results) < len(runs):  # each as it ends, so its time is its own
            for role, run in runs.items():
                if role not in results and run.poll() is not None:
                    results[role] = finish_role(settings, role, run, started)
            time.sleep(1)
        results = {role: results[role] for role in runs}
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
        service.terminate()
        service.wait(timeout=30)
        drop_database(admin, database_url)
    tracebacks = log.read_text(errors="replace").count("Traceback (most recent call last)")
    passed = tracebacks == 0
    lines = []
    for role, result in results.items():
        line, ok = summary(role, result)
        lines.append(line)
        if not ok:
            print(f"\n---- {role}: {result['output']}\n{_failures_text(Path(result['output']))}")
        passed = passed and ok
    print(f"\nfuzz summary (seed {settings.seed}, {settings.examples} examples)")
    print("\n".join(lines))
    print(f"service tracebacks: {tracebacks} (log: {log})")
    print(f"reports: {settings.out}")
    print("fuzz: PASSED" if passed else "fuzz: FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
