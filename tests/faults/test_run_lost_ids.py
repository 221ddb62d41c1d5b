"""A client that heard more of a dead run than was stored gets `run_lost` after what it heard.

The owner ships a run's log every 100 ms once another replica follows it, so its own client,
reading from memory, can be a few events ahead of the stored log when the owner dies. That
client follows the run again elsewhere with Last-Event-ID = the last id it heard; the
`error run_lost` and `done` it is sent must carry ids after that one, or an SSE client (which
keeps only the last id) would take them for events it already has. Found by the chaos soak
(tests/chaos, seed 2: `id 33 after 33`).
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
from tests.faults.checks import wait_for
from tests.faults.conftest import service_env

LEASE_TTL_S = 2.0
LONG = "Here is everything about our delivery options, one word at a time. " * 6
Event = tuple[int, str, dict[str, Any]]


class LongAnswer:
    def __call__(self, request: ChatRequest) -> Reply:
        return Reply.say(LONG)


@pytest.fixture
def long_model(fault_model: ScriptedModelServer) -> Iterator[ScriptedModelServer]:
    fault_model.use(LongAnswer(), latency=Latency(tokens_per_s=40))
    yield fault_model
    fault_model.use(OrderLookupPolicy(), latency=Latency())


def read(response: httpx.Response, into: list[Event], stop: Callable[[], bool]) -> None:
    with contextlib.suppress(httpx.TransportError):  # the owner is killed mid-stream
        _read(response, into, stop)


def _read(response: httpx.Response, into: list[Event], stop: Callable[[], bool]) -> None:
    seq, name, data = 0, "message", ""
    for line in response.iter_lines():
        if line.startswith("id:"):
            seq = int(line[3:])
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:]
        elif not line and data:
            into.append((seq, name, json.loads(data)))
            data = ""
            if stop():
                return


def stored_up_to(pg: procs.PrivatePostgres, run_id: str) -> int:
    rows = pg.query("SELECT max(last_seq) FROM run_event_chunks WHERE run_id = %s", (run_id,))
    return int(rows[0][0] or 0)


def test_run_lost_comes_after_the_last_id_the_client_heard(
    private_postgres: procs.PrivatePostgres,
    long_model: ScriptedModelServer,
    auth_headers: Callable[[str], dict[str, str]],
) -> None:
    env = service_env(private_postgres.url, long_model, THREAD_LEASE_TTL_S=str(LEASE_TTL_S))
    headers = {**auth_headers("cust_lost_ids"), "Accept": "text/event-stream"}
    with procs.ServiceProcess(env) as a, procs.ServiceProcess(env) as b:
        session = f"lost-{os.getpid()}-{time.monotonic_ns()}"
        heard: list[Event] = []  # the owner's client, reading as fast as it streams
        watched: list[Event] = []  # a follower on the other replica: the log gets shipped
        location: list[str] = []

        def own() -> None:
            with httpx.stream(
                "POST", a.url + f"/threads/{session}/messages", json={"content": "all"},
                headers=headers, timeout=30,
            ) as r:  # fmt: skip
                location.append(r.headers["content-location"])
                read(r, heard, lambda: False)

        def watch() -> None:
            with httpx.stream(
                "GET", b.url + location[0] + "/stream", headers=headers, timeout=30
            ) as r:
                read(r, watched, lambda: False)

        threads = [threading.Thread(target=own, daemon=True)]
        threads[0].start()
        wait_for(lambda: bool(location), "the run to start")
        threads.append(threading.Thread(target=watch, daemon=True))
        threads[1].start()
        run_id = location[0].rsplit("/", 1)[-1]
        # Killed while its client has heard more than the shipped log holds (it ships every
        # 100 ms; a token comes every 25 ms). The owner is frozen (SIGSTOP) before the check, so
        # no ship can land between the check and the kill; if the check fails it runs on.
        pid = a.pid
        assert pid is not None

        def frozen_ahead() -> bool:
            if len(watched) < 3 or len(heard) < 20:
                return False
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.05)  # a ship already sent commits; the client drains its socket
            if max(seq for seq, _, _ in heard) > stored_up_to(private_postgres, run_id):
                return True
            os.kill(pid, signal.SIGCONT)
            return False

        wait_for(frozen_ahead, "both readers to hear it, the owner's ahead of the stored log")
        a.kill9()
        for thread in threads:
            thread.join(10)
        last = max(seq for seq, _, _ in heard)
        stored = stored_up_to(private_postgres, run_id)
        assert stored < last, f"the log was stored up to {stored}: the owner died too late"
        location_ = location[0]

        time.sleep(LEASE_TTL_S + 0.5)  # the dead owner's lease expires
        again: list[Event] = []
        with httpx.stream(
            "GET", b.url + location_ + "/stream",
            headers={**headers, "Last-Event-ID": str(last)}, timeout=30,
        ) as r:  # fmt: skip
            assert r.status_code == 200
            read(r, again, lambda: False)
        assert [(name, data.get("code") or data.get("status")) for _, name, data in again] == [
            ("error", "run_lost"),
            ("done", "abandoned"),
        ]
        ids = [seq for seq, _, _ in again]
        assert ids == [last + 1, last + 2], (last, stored, ids)
        assert b.running
