"""Issue 17.1: database blips. The service runs as a real process on a private Postgres, which
the tests restart, stop, or cut off (pg_terminate_backend) under it.

Once the database is back, no request may fail; while it is down, an API request gets 503
database_unavailable with Retry-After, /readyz says so, and a streamed reply ends with
`error` then `done`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.fakellm import Latency, OrderLookupPolicy, ScriptedModelServer
from tests.faults import procs
from tests.faults.conftest import service_env

Headers = Callable[[str], dict[str, str]]
USER = "cust_blips"


@pytest.fixture(autouse=True)
def database_up(private_postgres: procs.PrivatePostgres) -> Iterator[None]:
    """Every test starts and ends with the database running (a failed test may stop it)."""
    private_postgres.start()
    yield
    private_postgres.start()


def get_many(
    svc: procs.ServiceProcess, headers: dict[str, str], n: int, parallel: int, path: str
) -> list[int | str]:
    """`n` GETs, `parallel` at a time; each one's status code or exception name."""
    with httpx.Client(
        base_url=svc.url, headers=headers, timeout=30, limits=httpx.Limits(max_connections=50)
    ) as client:

        def one(_: int) -> int | str:
            try:
                return client.get(path).status_code
            except httpx.HTTPError as error:
                return type(error).__name__

        with ThreadPoolExecutor(parallel) as pool:
            return list(pool.map(one, range(n)))


def failures(outcomes: list[int | str]) -> list[int | str]:
    return [o for o in outcomes if not (isinstance(o, int) and 200 <= o < 300)]


def warm(svc: procs.ServiceProcess, headers: dict[str, str]) -> None:
    """Every pooled connection in use at least once: 100 requests, 20 at a time."""
    assert failures(get_many(svc, headers, 100, 20, "/threads")) == []


class TestOnceTheDatabaseIsBack:
    def test_no_request_fails_after_a_fast_restart(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
    ) -> None:
        headers = auth_headers(USER)
        warm(service, headers)
        private_postgres.restart(mode="fast")
        assert failures(get_many(service, headers, 50, 10, "/threads")) == []
        assert httpx.get(service.url + "/readyz", timeout=5).status_code == 200

    def test_no_request_fails_after_every_backend_is_terminated(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
    ) -> None:
        headers = auth_headers(USER)
        warm(service, headers)
        assert private_postgres.terminate_backends() > 0
        assert failures(get_many(service, headers, 50, 10, "/threads")) == []

    def test_reads_in_flight_when_backends_are_terminated_do_not_fail(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
    ) -> None:
        headers = auth_headers(USER)
        warm(service, headers)
        outcomes: list[int | str] = []
        reading = threading.Thread(
            target=lambda: outcomes.extend(get_many(service, headers, 300, 20, "/threads"))
        )
        reading.start()
        time.sleep(0.3)
        terminated = private_postgres.terminate_backends(wait_ms=0)
        reading.join()
        assert terminated > 0
        assert failures(outcomes) == []


class TestWhileTheDatabaseIsDown:
    def test_a_request_gets_503_database_unavailable_with_retry_after(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
    ) -> None:
        headers = auth_headers(USER)
        warm(service, headers)
        private_postgres.stop(mode="fast")
        for _ in range(3):
            started = time.monotonic()
            response = httpx.get(service.url + "/threads", headers=headers, timeout=30)
            assert time.monotonic() - started < 2
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "database_unavailable"
            assert int(response.headers["Retry-After"]) > 0
        private_postgres.start()
        assert failures(get_many(service, headers, 50, 10, "/threads")) == []

    def test_readyz_is_503_while_down_and_200_right_after(
        self, service: procs.ServiceProcess, private_postgres: procs.PrivatePostgres
    ) -> None:
        private_postgres.stop(mode="fast")
        down = httpx.get(service.url + "/readyz", timeout=10)
        assert down.status_code == 503
        assert down.json()["database"] == "unreachable"
        private_postgres.start()
        up = httpx.get(service.url + "/readyz", timeout=10)
        assert up.status_code == 200, up.text
        assert up.json()["database"] == "ok"


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    name, data = "message", ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            data = line.partition(":")[2].strip()
        elif not line and data:
            yield name, json.loads(data)
            name, data = "message", ""


@pytest.fixture
def slow_greeting(fault_model: ScriptedModelServer) -> Iterator[None]:
    """The greeting (12 words) streams at 8 words a second: 1.5 s of turn to cut into."""
    fault_model.use(OrderLookupPolicy(), latency=Latency(tokens_per_s=8))
    yield
    fault_model.use(OrderLookupPolicy(), latency=Latency())


def new_thread(svc: procs.ServiceProcess, headers: dict[str, str]) -> str:
    created = httpx.post(svc.url + "/threads", headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def stream_turn(
    svc: procs.ServiceProcess,
    headers: dict[str, str],
    session_id: str,
    at_first_token: Callable[[], None],
) -> tuple[list[str], float]:
    """Post "hello" as SSE; call `at_first_token` once; the event names, and the seconds
    from that call's start to `done`."""
    names: list[str] = []
    cut_at = 0.0
    with httpx.stream(
        "POST",
        f"{svc.url}/threads/{session_id}/messages",
        json={"content": "hello"},
        headers={**headers, "Accept": "text/event-stream"},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        for name, _ in sse_events(response):
            names.append(name)
            if name == "token" and not cut_at:
                cut_at = time.monotonic()
                at_first_token()
            if name == "done":
                break
    return names, time.monotonic() - cut_at


def running_runs(pg: procs.PrivatePostgres, session_id: str) -> int:
    rows = pg.query(
        "SELECT count(*) FROM runs WHERE thread_id = %s AND status = 'running'",
        (f"{USER}:{session_id}",),
    )
    return int(rows[0][0])


def wait_until_no_running_run(
    pg: procs.PrivatePostgres, session_id: str, within_s: float = 5
) -> int:
    deadline = time.monotonic() + within_s
    while (left := running_runs(pg, session_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


class TestAStreamedTurn:
    def test_in_flight_when_the_database_goes_down_ends_with_error_then_done(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
        slow_greeting: None,
    ) -> None:
        headers = auth_headers(USER)
        session_id = new_thread(service, headers)
        names, seconds = stream_turn(
            service, headers, session_id, lambda: private_postgres.stop(mode="fast")
        )
        assert names[-2:] == ["error", "done"], names
        assert seconds < 5

    def test_cut_by_a_restart_is_not_left_running(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
        slow_greeting: None,
    ) -> None:
        headers = auth_headers(USER)
        session_id = new_thread(service, headers)
        names, _ = stream_turn(
            service, headers, session_id, lambda: private_postgres.restart(mode="fast")
        )
        assert names[-1] == "done"
        assert wait_until_no_running_run(private_postgres, session_id) == 0

    def test_ended_by_an_outage_is_not_left_running_once_the_database_is_back(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        auth_headers: Headers,
        slow_greeting: None,
    ) -> None:
        headers = auth_headers(USER)
        session_id = new_thread(service, headers)
        names, _ = stream_turn(
            service, headers, session_id, lambda: private_postgres.stop(mode="fast")
        )
        assert names[-1] == "done"
        private_postgres.start()
        assert wait_until_no_running_run(private_postgres, session_id, within_s=8) == 0


class TestAFollowedRun:
    def test_a_follow_outlives_an_outage_under_it_and_reaches_done(
        self,
        service: procs.ServiceProcess,
        private_postgres: procs.PrivatePostgres,
        fault_model: ScriptedModelServer,
        auth_headers: Headers,
        slow_greeting: None,
        tmp_path: Any,
    ) -> None:
        """A run of one replica, followed through another (which reads its shipped log from
        the database) while the database is down for two seconds: the follow rides the
        outage out and ends with `done`; nothing escapes into the ASGI server (found by the
        chaos soak: the stream was cut half-way with "Exception in ASGI application")."""
        headers = auth_headers(USER)
        session_id = new_thread(service, headers)
        env = service_env(private_postgres.url, fault_model)
        with procs.ServiceProcess(env, log_dir=tmp_path) as other:
            with httpx.stream(
                "POST",
                f"{service.url}/threads/{session_id}/messages",
                json={"content": "hello"},
                headers={**headers, "Accept": "text/event-stream"},
                timeout=60,
            ) as response:
                location = response.headers["content-location"]
                for name, _ in sse_events(response):
                    if name == "token":
                        break  # the client leaves; the run goes on
            names: list[str] = []
            with httpx.stream(
                "GET",
                other.url + location + "/stream",
                headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": "1"},
                timeout=60,
            ) as followed:
                assert followed.status_code == 200
                for name, _ in sse_events(followed):
                    if not names:  # its reads fail while the database is down
                        private_postgres.restart(mode="fast", down_s=2)
                    names.append(name)
                    if name == "done":
                        break
            assert names[-1] == "done", names
            assert "Exception in ASGI application" not in other.log(2000)
