"""Issue 44: every network call has a deadline. The service runs as a real process whose
path to Postgres (or to the model) goes through the chaos soak's fault proxy
(tests/chaos/netproxy.py), which black-holes it: connections accepted, nothing forwarded,
nothing closed, as when a NAT or a load balancer drops a connection's state.

Such a connection never answers and never fails by itself, and its kernel is no help (the
proxy acknowledges every byte, so TCP keepalives and TCP_USER_TIMEOUT see a healthy peer):
only the service's own deadlines end the wait. A request must get its 503, a turn its
`done` within TURN_DEADLINE_S, and the pool must have every slot back once the path heals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.chaos.netproxy import NetProxy
from tests.chaos.netproxy import Path as ProxyPath
from tests.fakellm import ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import wait_for
from tests.faults.conftest import service_env
from tests.faults.test_db_blips import new_thread, sse_events

Headers = Callable[[str], dict[str, str]]
USER = "cust_blackhole"
DB_CALL_DEADLINE_S = 3.0
# Room for the call deadline's cut, then the run's closing statement tried three times and
# its lease released, each a checkout that waits for a connection attempt to time out.
TURN_DEADLINE_S = 20.0
# What a cut-off wait may take beyond its deadline: the service's own work, a slow machine.
SLACK_S = 4.0
FAST_ENV = {
    "DB_POOL_TIMEOUT_S": "2",
    "DB_POOL_MAX": "4",
    "DB_CALL_DEADLINE_S": str(DB_CALL_DEADLINE_S),
    "DB_CONNECT_TIMEOUT_S": "2",
    "TURN_DEADLINE_S": str(TURN_DEADLINE_S),
    "THREAD_LEASE_TTL_S": "3",
    "LLM_TIMEOUT_S": "3",
    "LLM_CALL_DEADLINE_S": "6",
    "SSE_HEARTBEAT_S": "1",
}


@pytest.fixture(scope="module")
def proxy() -> Iterator[NetProxy]:
    with NetProxy(seed=44) as running:
        yield running


@pytest.fixture
def db_path(
    proxy: NetProxy, private_postgres: procs.PrivatePostgres, request: pytest.FixtureRequest
) -> ProxyPath:
    return proxy.path(f"db {request.node.name}", ("127.0.0.1", private_postgres.port))


def through(path: ProxyPath, pg: procs.PrivatePostgres) -> str:
    return f"postgresql://postgres@127.0.0.1:{path.port}/{pg.dbname}"


@pytest.fixture
def service_via_proxy(
    db_path: ProxyPath,
    private_postgres: procs.PrivatePostgres,
    fault_model: ScriptedModelServer,
    tmp_path: Path,
) -> Iterator[procs.ServiceProcess]:
    env = service_env(through(db_path, private_postgres), fault_model, **FAST_ENV)
    with procs.ServiceProcess(env, log_dir=tmp_path) as svc:
        yield svc


def get_threads(svc: procs.ServiceProcess, headers: dict[str, str]) -> tuple[int | str, float]:
    """GET /threads: its status (or the client's error: it waited 30 s) and its seconds."""
    started = time.monotonic()
    try:
        status: int | str = httpx.get(svc.url + "/threads", headers=headers, timeout=30).status_code
    except httpx.HTTPError as error:
        status = type(error).__name__
    return status, time.monotonic() - started


class TestADatabasePathBlackHoled:
    def test_a_request_gets_503_within_the_deadline_not_a_hang(
        self, service_via_proxy: procs.ServiceProcess, db_path: ProxyPath, auth_headers: Headers
    ) -> None:
        headers = auth_headers(USER)
        assert get_threads(service_via_proxy, headers)[0] == 200
        db_path.blackhole(strand=True)
        status, seconds = get_threads(service_via_proxy, headers)
        assert status == 503
        assert seconds < DB_CALL_DEADLINE_S + SLACK_S

    def test_every_pool_slot_comes_back_once_the_path_heals(
        self, service_via_proxy: procs.ServiceProcess, db_path: ProxyPath, auth_headers: Headers
    ) -> None:
        """The connections it stranded never answer again, healed or not (their state is
        gone): each is cut at its deadline and replaced, so the pool serves as before."""
        headers = auth_headers(USER)
        for _ in range(8):
            assert get_threads(service_via_proxy, headers)[0] == 200
        db_path.blackhole(strand=True)
        for _ in range(6):  # more than the pool's 4 slots: each checkout meets a stranded one
            get_threads(service_via_proxy, headers)
        db_path.heal()

        def serves() -> bool:
            return all(get_threads(service_via_proxy, headers)[0] == 200 for _ in range(8))

        wait_for(serves, "every request answered after the heal", timeout_s=20)


class TestATurnWhoseDatabasePathBlackHoles:
    def test_ends_with_done_within_the_turn_deadline_and_is_not_left_running(
        self,
        service_via_proxy: procs.ServiceProcess,
        db_path: ProxyPath,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
        slow_model: ScriptedModelServer,
    ) -> None:
        headers = auth_headers(USER)
        session = new_thread(service_via_proxy, headers)
        names: list[str] = []
        cut_at = 0.0
        posted = time.monotonic()
        with httpx.stream(
            "POST",
            f"{service_via_proxy.url}/threads/{session}/messages",
            json={"content": "hello"},
            headers={**headers, "Accept": "text/event-stream"},
            timeout=60,
        ) as response:
            assert response.status_code == 200
            # Heartbeats keep the stream alive: the wall clock decides when it hangs.
            for line in response.iter_lines():
                if line.startswith("event:"):
                    names.append(line.partition(":")[2].strip())
                if names and names[-1] == "token" and not cut_at:
                    cut_at = time.monotonic()
                    db_path.blackhole(strand=True)
                if names and names[-1] == "done":
                    break
                if time.monotonic() - posted > TURN_DEADLINE_S + 15:
                    break
        assert names[-1] == "done", names
        assert cut_at and time.monotonic() - posted < TURN_DEADLINE_S
        db_path.heal()
        thread = f"{USER}:{session}"

        def closed() -> bool:
            rows = private_postgres.query(
                "SELECT count(*) FROM runs WHERE thread_id = %s AND status = 'running'", (thread,)
            )
            return int(rows[0][0]) == 0

        wait_for(closed, "the run closed once the path healed", timeout_s=20)


class TestAModelPathBlackHoled:
    def test_a_turn_fails_with_model_unavailable_within_the_call_deadline(
        self,
        proxy: NetProxy,
        private_postgres: procs.PrivatePostgres,
        fault_model: ScriptedModelServer,
        auth_headers: Headers,
        tmp_path: Path,
    ) -> None:
        host, _, port = fault_model.base_url.split("//")[1].split("/")[0].partition(":")
        model_path = proxy.path("model", (host, int(port)))
        env = service_env(private_postgres.url, fault_model, **FAST_ENV)
        env["OPENAI_BASE_URL"] = fault_model.base_url.replace(
            f"{host}:{port}", f"127.0.0.1:{model_path.port}"
        )
        headers = auth_headers(USER)
        with procs.ServiceProcess(env, log_dir=tmp_path) as svc:
            session = new_thread(svc, headers)
            model_path.blackhole(strand=True)
            started = time.monotonic()
            events: list[tuple[str, dict[str, object]]] = []
            with httpx.stream(
                "POST",
                f"{svc.url}/threads/{session}/messages",
                json={"content": "hello"},
                headers={**headers, "Accept": "text/event-stream"},
                timeout=60,
            ) as response:
                for name, data in sse_events(response):
                    events.append((name, data))
                    if name == "done":
                        break
            assert time.monotonic() - started < float(FAST_ENV["LLM_CALL_DEADLINE_S"]) + SLACK_S
            errors = [data for name, data in events if name == "error"]
            assert errors and errors[0]["code"] == "model_unavailable", events
            model_path.heal()
            reply = httpx.post(
                f"{svc.url}/threads/{session}/messages",
                json={"content": "hello again"},
                headers=headers,
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
