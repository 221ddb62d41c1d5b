"""Takeover across replicas: two people accepting one thread on two replicas (one wins), and
the customer's thread stream surviving a kill -9 of the replica that served it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.api.auth import issue_token
from tests.fakellm import ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import wait_for
from tests.faults.conftest import JWT_SECRET, service_env

CUSTOMER = "noah_brown_6181"


@pytest.fixture(scope="module")
def replicas(
    private_postgres: procs.PrivatePostgres, fault_model: ScriptedModelServer
) -> Iterator[tuple[procs.ServiceProcess, procs.ServiceProcess]]:
    env = service_env(private_postgres.url, fault_model)
    with procs.ServiceProcess(env) as a, procs.ServiceProcess(env) as b:
        yield a, b


def staff(user: str) -> dict[str, str]:
    token = issue_token(JWT_SECRET, user, role="staff", name=user.removeprefix("staff-"))
    return {"Authorization": f"Bearer {token}"}


def customer() -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(JWT_SECRET, CUSTOMER)}"}


def queued_thread(pg: procs.PrivatePostgres, session: str) -> str:
    """A thread its agent handed off (as the run's closing statement leaves it)."""
    thread = f"{CUSTOMER}:{session}"
    pg.query(
        "INSERT INTO threads (thread_id, user_id, session_id) VALUES (%s, %s, %s)"
        " RETURNING thread_id",
        (thread, CUSTOMER, session),
    )
    pg.query(
        "SELECT * FROM cs_control(%s, 'handoff', NULL, 'agent', 'agent', NULL, NULL, NULL,"
        " 'wants a person', 'handed off by the agent')",
        (thread,),
    )
    return thread


def test_two_people_accepting_on_two_replicas_one_wins(
    replicas: tuple[procs.ServiceProcess, procs.ServiceProcess],
    private_postgres: procs.PrivatePostgres,
) -> None:
    a, b = replicas
    for round_ in range(10):
        thread = queued_thread(private_postgres, f"race-{round_}")
        barrier = threading.Barrier(2)
        codes: dict[str, int] = {}

        def accept(
            svc: procs.ServiceProcess,
            who: str,
            thread: str = thread,
            barrier: threading.Barrier = barrier,
            codes: dict[str, int] = codes,
        ) -> None:
            barrier.wait()
            answer = httpx.post(
                f"{svc.url}/staff/threads/{thread}/control",
                json={"action": "accept", "version": 1},
                headers=staff(who),
                timeout=10,
            )
            codes[who] = answer.status_code

        pair = [
            threading.Thread(target=accept, args=(a, "staff-alice")),
            threading.Thread(target=accept, args=(b, "staff-bob")),
        ]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        assert sorted(codes.values()) == [200, 409], codes
        ((assignee, version),) = private_postgres.query(
            "SELECT assignee, control_version FROM thread_leases WHERE thread_id = %s", (thread,)
        )
        winner = next(who for who, code in codes.items() if code == 200)
        assert assignee == winner and version == 2
        accepts = private_postgres.query(
            "SELECT count(*) FROM control_history WHERE thread_id = %s AND action = 'accept'",
            (thread,),
        )
        assert accepts == [(1,)]


def read_events(
    url: str, headers: dict[str, str], last_id: str | None, out: list[tuple[str, str, Any]]
) -> None:
    """Append (id, event, data) of the stream until it breaks."""
    h = {**headers, "Accept": "text/event-stream"}
    if last_id is not None:
        h["Last-Event-ID"] = last_id
    event_id, name = "", ""
    try:
        with httpx.stream("GET", url, headers=h, timeout=httpx.Timeout(30, read=60)) as r:
            for line in r.iter_lines():
                if line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:") and name:
                    out.append((event_id, name, json.loads(line[5:].strip())))
                    name = ""
    except httpx.HTTPError:
        pass  # the replica died: the caller reconnects


def test_the_customers_stream_resumes_on_another_replica_after_a_kill(
    replicas: tuple[procs.ServiceProcess, procs.ServiceProcess],
    private_postgres: procs.PrivatePostgres,
) -> None:
    a, b = replicas
    thread = queued_thread(private_postgres, "kill-events")
    seen: list[tuple[str, str, Any]] = []
    path = "/threads/kill-events/events"
    first = threading.Thread(target=read_events, args=(a.url + path, customer(), None, seen))
    first.start()
    alice = staff("staff-alice")
    accepted = httpx.post(
        f"{b.url}/staff/threads/{thread}/control",
        json={"action": "accept", "version": 1},
        headers=alice,
        timeout=10,
    )
    assert accepted.status_code == 200

    def say(text: str) -> None:
        answer = httpx.post(
            f"{b.url}/staff/threads/{thread}/messages",
            json={"content": text, "client_message_id": text},
            headers=alice,
            timeout=10,
        )
        assert answer.status_code == 200, answer.text

    say("one")
    wait_for(lambda: any(e[2].get("content") == "one" for e in seen), "the first message", 10)
    a.kill9()
    first.join(timeout=10)
    say("two")
    say("three")
    last_id = seen[-1][0]
    resumed: list[tuple[str, str, Any]] = []
    second = threading.Thread(target=read_events, args=(b.url + path, customer(), last_id, resumed))
    second.daemon = True
    second.start()
    wait_for(lambda: len([e for e in resumed if e[1] == "message"]) >= 2, "the rest", 10)
    a.start()  # the module's other tests keep two replicas

    everything = seen + resumed
    ids = [int(e[0]) for e in everything]
    assert ids == sorted(set(ids))  # in order, none twice
    contents = [e[2]["content"] for e in everything if e[1] == "message"]
    assert contents == ["one", "two", "three"]
    assert [e[2]["state"] for e in everything if e[1] == "control"] == ["human"]
