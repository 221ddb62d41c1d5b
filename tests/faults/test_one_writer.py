"""One writer per thread across two replicas, whatever happens to a replica or its connections.

Two service processes share one database (directly, or through PgBouncer in transaction
mode). One of them runs a slow turn; then it stalls past its lease (SIGSTOP), or its
connections are cut (pg_terminate_backend). The other replica must either wait its turn
(409) or, once the lease has expired, take the thread over; the stalled one, when it wakes,
must stop without committing. Never two children of one checkpoint, never an acknowledged
turn missing from the state.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fakellm import ChatRequest, Latency, OrderLookupPolicy, Reply, ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import forks, running_runs, wait_for
from tests.faults.conftest import service_env

LEASE_TTL_S = 2.0
LONG = "Let me tell you everything about our delivery options in detail. " * 4


class TalkPolicy:
    """A long answer to "tell me everything", a short one to anything else."""

    def __call__(self, request: ChatRequest) -> Reply:
        if "everything" in request.last_user_text():
            return Reply.say(LONG)
        return Reply.say("Short answer.")


@pytest.fixture
def talk_model(fault_model: ScriptedModelServer) -> Iterator[ScriptedModelServer]:
    fault_model.use(TalkPolicy(), latency=Latency(tokens_per_s=15))
    yield fault_model
    fault_model.use(OrderLookupPolicy(), latency=Latency())


class Stream:
    """An SSE POST read in a background thread; `.events` as (event, data) pairs."""

    def __init__(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._thread = threading.Thread(target=self._read, args=(url, body, headers), daemon=True)
        self._thread.start()

    def _read(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        event = "message"
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream(
                "POST",
                url,
                json=body,
                headers={**headers, "Accept": "text/event-stream"},
                timeout=60,
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    self.events.append((event, json.loads(line.split(":", 1)[1])))

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def join(self, timeout_s: float = 30) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the stream never ended"


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
def database(
    request: pytest.FixtureRequest, private_postgres: procs.PrivatePostgres
) -> Iterator[tuple[str, dict[str, str]]]:
    """The URL the replicas use, and what they need for it."""
    if request.param == "direct":
        yield private_postgres.url, {}
        return
    with procs.PgBouncer(private_postgres.url) as bouncer:
        yield bouncer.url, {"DB_PREPARE_THRESHOLD": "none"}


@pytest.fixture(scope="module")
def replicas(
    database: tuple[str, dict[str, str]], fault_model: ScriptedModelServer
) -> Iterator[tuple[procs.ServiceProcess, procs.ServiceProcess]]:
    """Two replicas for the module's tests on each database path (a test's model policy
    is set by `talk_model`)."""
    url, extra = database
    env = service_env(url, fault_model, THREAD_LEASE_TTL_S=str(LEASE_TTL_S), **extra)
    with procs.ServiceProcess(env) as a, procs.ServiceProcess(env) as b:
        yield a, b


def test_a_stalled_replica_loses_its_claim_and_commits_nothing(
    replicas: tuple[procs.ServiceProcess, procs.ServiceProcess],
    talk_model: ScriptedModelServer,
    private_postgres: procs.PrivatePostgres,
    auth_headers: Callable[[str], dict[str, str]],
) -> None:
    a, b = replicas
    user = "cust_stall"
    session = f"stall-{os.getpid()}-{time.monotonic_ns()}"
    thread = f"{user}:{session}"
    headers = auth_headers(user)
    slow = Stream(
        a.url + f"/threads/{session}/messages", {"content": "tell me everything"}, headers
    )
    wait_for(lambda: slow.names().count("token") >= 3, "replica A to stream")
    assert a.pid is not None
    os.kill(a.pid, signal.SIGSTOP)  # a stall longer than the lease: GC, swap, a frozen VM
    try:
        time.sleep(LEASE_TTL_S + 0.5)
        taken = httpx.post(
            b.url + f"/threads/{session}/messages",
            json={"content": "quick question"},
            headers=headers,
            timeout=30,
        )
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert taken.status_code == 200, taken.text
    assert taken.json()["status"] == "completed"
    slow.join()
    names = slow.names()
    assert names[-2:] == ["error", "done"], names
    assert slow.events[-2][1]["code"] == "thread_superseded"
    assert slow.events[-1][1]["status"] == "failed"

    state = httpx.get(b.url + f"/threads/{session}/state", headers=headers, timeout=10).json()
    assert [(m["role"], m["content"]) for m in state["messages"]] == [
        ("user", "quick question"),
        ("assistant", "Short answer."),
    ]
    assert forks(private_postgres, thread) == []
    assert running_runs(private_postgres, thread) == 0
    assert "thread lease lost" in a.log(400)
    # The thread goes on as usual.
    after = httpx.post(
        a.url + f"/threads/{session}/messages", json={"content": "thanks"}, headers=headers
    )
    assert after.status_code == 200 and after.json()["status"] == "completed"
    assert forks(private_postgres, thread) == []


def test_cut_connections_do_not_let_a_second_writer_in(
    replicas: tuple[procs.ServiceProcess, procs.ServiceProcess],
    talk_model: ScriptedModelServer,
    private_postgres: procs.PrivatePostgres,
    auth_headers: Callable[[str], dict[str, str]],
) -> None:
    a, b = replicas
    user = "cust_cut"
    session = f"cut-{os.getpid()}-{time.monotonic_ns()}"
    thread = f"{user}:{session}"
    headers = auth_headers(user)
    slow = Stream(
        a.url + f"/threads/{session}/messages", {"content": "tell me everything"}, headers
    )
    wait_for(lambda: slow.names().count("token") >= 3, "replica A to stream")
    assert private_postgres.terminate_backends() > 0  # every connection of both replicas
    second = httpx.post(
        b.url + f"/threads/{session}/messages",
        json={"content": "quick question"},
        headers=headers,
        timeout=30,
    )
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "thread_busy"
    slow.join()
    assert slow.names()[-1] == "done"
    assert slow.events[-1][1]["status"] == "completed"
    state = httpx.get(b.url + f"/threads/{session}/state", headers=headers, timeout=10).json()
    assert [m["role"] for m in state["messages"]] == ["user", "assistant"]
    assert state["messages"][1]["content"] == LONG
    assert forks(private_postgres, thread) == []
    assert running_runs(private_postgres, thread) == 0


def _read_stream(url: str, headers: dict[str, str]) -> list[tuple[int, str, dict[str, Any]]]:
    """A GET SSE stream to its end: (id, event, data) triples."""
    out: list[tuple[int, str, dict[str, Any]]] = []
    event, seq = "message", 0
    with httpx.stream(
        "GET", url, headers={**headers, "Accept": "text/event-stream"}, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("id:"):
                seq = int(line.split(":", 1)[1])
            elif line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                out.append((seq, event, json.loads(line.split(":", 1)[1])))
    return out


def test_a_dropped_stream_resumes_on_the_other_replica_without_gap_or_duplicate(
    replicas: tuple[procs.ServiceProcess, procs.ServiceProcess],
    talk_model: ScriptedModelServer,
    auth_headers: Callable[[str], dict[str, str]],
) -> None:
    a, b = replicas
    headers = auth_headers("cust_resume")
    session = f"resume-{os.getpid()}-{time.monotonic_ns()}"
    seen: list[tuple[int, str, dict[str, Any]]] = []
    location = ""
    with httpx.stream(
        "POST",
        a.url + f"/threads/{session}/messages",
        json={"content": "tell me everything"},
        headers={**headers, "Accept": "text/event-stream"},
        timeout=60,
    ) as response:
        location = response.headers["content-location"]
        event, seq = "message", 0
        for line in response.iter_lines():  # the phone goes into a tunnel after 5 tokens
            if line.startswith("id:"):
                seq = int(line.split(":", 1)[1])
            elif line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                seen.append((seq, event, json.loads(line.split(":", 1)[1])))
                if sum(e[1] == "token" for e in seen) >= 5:
                    break
    rest = _read_stream(
        b.url + location + "/stream", {**headers, "Last-Event-ID": str(seen[-1][0])}
    )
    assert rest[-1][1] == "done" and rest[-1][2]["status"] == "completed"
    together = seen + rest
    ids = [e[0] for e in together]
    assert ids == sorted(set(ids))  # increasing: no duplicate
    text = "".join(e[2]["text"] for e in together if e[1] == "token")
    assert text == LONG  # no gap
    # Joined after the end, on either replica: the same run, replayed at once.
    for replica in (a, b):
        whole = _read_stream(replica.url + location + "/stream?after=0", headers)
        assert "".join(e[2]["text"] for e in whole if e[1] == "token") == LONG
        assert whole[-1][1] == "done"


def test_a_cancel_sent_to_the_other_replica_stops_the_run(
    replicas: tuple[procs.ServiceProcess, procs.ServiceProcess],
    talk_model: ScriptedModelServer,
    private_postgres: procs.PrivatePostgres,
    auth_headers: Callable[[str], dict[str, str]],
) -> None:
    a, b = replicas
    headers = auth_headers("cust_cancel")
    session = f"cancel-{os.getpid()}-{time.monotonic_ns()}"
    slow = Stream(
        a.url + f"/threads/{session}/messages", {"content": "tell me everything"}, headers
    )
    wait_for(lambda: slow.names().count("token") >= 3, "replica A to stream")
    run_id = slow.events[0][1]["run_id"]
    asked = time.monotonic()
    cancel = httpx.post(b.url + f"/threads/{session}/runs/{run_id}/cancel", headers=headers)
    assert cancel.status_code == 202
    slow.join()
    assert time.monotonic() - asked < 5
    assert slow.events[-1][0] == "done" and slow.events[-1][1]["status"] == "cancelled"
    text = "".join(d["text"] for name, d in slow.events if name == "token")
    assert 0 < len(text) < len(LONG)
    again = httpx.post(b.url + f"/threads/{session}/runs/{run_id}/cancel", headers=headers)
    assert again.status_code == 409
    thread = f"cust_cancel:{session}"
    assert forks(private_postgres, thread) == []
    assert running_runs(private_postgres, thread) == 0
