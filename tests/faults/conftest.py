"""Fixtures for fault tests: a private Postgres, PgBouncer, the service as a real process.

Every test under tests/faults/ gets the `faults` marker (`pytest -m "not faults"` skips
them). A failing test's report carries the tail of each live process's log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.api.auth import issue_token
from app.identity import Role
from tests.fakellm import Latency, OrderLookupPolicy, ScriptedModelServer
from tests.faults import procs

FAULTS_DIR = Path(__file__).resolve().parent
JWT_SECRET = "faults-test-secret-faults-test-secret-0123456789"
MODEL = "gpt-4o-mini"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if FAULTS_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.faults)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and FAULTS_DIR in Path(str(item.fspath)).resolve().parents:
        for proc in procs.live():
            report.sections.append((f"log of {proc.name}", proc.log()))
    return report


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[procs.PrivatePostgres]:
    """A migrated throwaway cluster for the module's tests (restart it as you like; a test
    that leaves it stopped should start it again)."""
    with procs.PrivatePostgres(copy_of=procs.migrated_template()) as pg:
        yield pg


@pytest.fixture
def pgbouncer(private_postgres: procs.PrivatePostgres) -> Iterator[procs.PgBouncer]:
    with procs.PgBouncer(private_postgres.url) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def fault_model() -> Iterator[ScriptedModelServer]:
    """The service's model: greets, asks for an order number, looks orders up. Stateless,
    so any number of conversations share it; `fault_model.use(policy, latency=...)` for a
    test that needs something else (reset it afterwards)."""
    with ScriptedModelServer(OrderLookupPolicy(), record=False) as server:
        yield server


@pytest.fixture
def slow_model(fault_model: ScriptedModelServer) -> Iterator[ScriptedModelServer]:
    """The same model, streaming 20 tokens a second (a turn that is still going when the
    test pulls something out from under it)."""
    fault_model.use(OrderLookupPolicy(), latency=Latency(ttft_ms=0, tokens_per_s=20))
    yield fault_model
    fault_model.use(OrderLookupPolicy(), latency=Latency())


def service_env(database_url: str, model: ScriptedModelServer, **extra: str) -> dict[str, str]:
    """The environment of a service under test: this database, this model, a known secret."""
    return {
        "DATABASE_URL": database_url,
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test",
        "LLM_MODEL": MODEL,
        "LLM_PROVIDER": "openai",
        "LLM_MAX_RETRIES": "0",
        "JWT_SECRET": JWT_SECRET,
        "OBSERVATION_FORMAT": "json",
        **extra,
    }


@pytest.fixture(scope="module")
def service(
    private_postgres: procs.PrivatePostgres, fault_model: ScriptedModelServer
) -> Iterator[procs.ServiceProcess]:
    """The service on the module's private Postgres, one worker."""
    with procs.ServiceProcess(service_env(private_postgres.url, fault_model)) as svc:
        yield svc


@pytest.fixture
def auth_headers() -> Callable[[str], dict[str, str]]:
    """`auth_headers("cust_1")`: a bearer token the service under test accepts."""

    def headers(user_id: str) -> dict[str, str]:
        role: Role = "guest" if user_id.startswith("guest-") else "customer"
        return {"Authorization": f"Bearer {issue_token(JWT_SECRET, user_id, role=role)}"}

    return headers
