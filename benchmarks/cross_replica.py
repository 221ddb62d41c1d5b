"""Cross-replica latency: something posted on replica A, seen on replica B.

Part of the `scale` section (benchmarks/scale_section.py starts the two replicas, the model
and this receiver). Every time is read by this one process (time.monotonic), from the moment
the request to A is sent:

- cancel: a run streams on B (the model at 20 tokens/s, a long answer); after its first
  token, `POST {run}/cancel` on A; seen when B's stream ends with `done` (cancelled);
- staff message: a staff member holding a thread posts on A; seen when the customer's
  `/threads/{id}/events` stream on B carries it;
- webhook: a change of control on A (a transfer between two staff members) enqueues a
  `handoff.transferred` webhook; seen when the receiver here gets it, from whichever
  replica's delivery loop sent it.

A random pause of up to 0.4 s before each try, so a try does not start in step with a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import psycopg

from app.api.auth import issue_token
from benchmarks.stats import percentile

SSE = {"Accept": "text/event-stream"}
SEEN_TIMEOUT_S = 15.0
ALICE, BOB = "staff-alice", "staff-bob"


class Receiver:
    """A helpdesk's webhook endpoint on a free port: records (arrival, body) of each POST."""

    def __init__(self) -> None:
        self.got: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                at = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.got.append((at, json.loads(body)))
                    receiver.lock.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _arrival(self, thread: str, version: int) -> float | None:
        for at, body in self.got:
            data = body.get("data", {})
            if data.get("thread_id") == thread and data.get("version") == version:
                return at
        return None

    def wait_for(self, thread: str, version: int, timeout_s: float) -> float | None:
        """When the event of `thread` at control `version` arrived (None: not in time)."""
        with self.lock:
            self.lock.wait_for(lambda: self._arrival(thread, version) is not None, timeout_s)
            return self._arrival(thread, version)


def bearer(secret: str, user: str, staff: bool = False) -> dict[str, str]:
    if not staff:
        return {"Authorization": f"Bearer {issue_token(secret, user)}"}
    token = issue_token(secret, user, role="staff", name=user.removeprefix("staff-"))
    return {"Authorization": f"Bearer {token}"}


def queued_thread(db_url: str, customer: str, session: str) -> str:
    """A thread its agent handed off, as the run's closing statement leaves it."""
    thread = f"{customer}:{session}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO threads (thread_id, user_id, session_id) VALUES (%s, %s, %s)",
            (thread, customer, session),
        )
        conn.execute(
            "SELECT * FROM cs_control(%s, 'handoff', NULL, 'agent', 'agent', NULL, NULL, NULL,"
            " 'wants a person', 'handed off by the agent')",
            (thread,),
        )
    return thread


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    event = ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event:
            yield event, json.loads(line[5:].strip())
            event = ""


def summary(latencies: list[float], answered: list[float], failed: int) -> dict[str, Any]:
    ms = [1000 * x for x in latencies]
    return {
        "tries": len(ms) + failed,
        "seen": len(ms),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "max_ms": max(ms) if ms else float("nan"),
        "a_answered_p50_ms": percentile([1000 * x for x in answered], 50),
    }


async def pause() -> None:
    await asyncio.sleep(random.uniform(0.0, 0.4))


async def cancel_once(
    http: httpx.AsyncClient, a: str, b: str, h: dict[str, str], session: str
) -> tuple[float, float] | None:
    """One run streamed from B, cancelled on A: (A answered, B's stream ended) after the
    cancel was sent; None when it did not end cancelled in time."""
    first_token = asyncio.Event()
    done: asyncio.Future[tuple[float, str]] = asyncio.get_running_loop().create_future()
    path: list[str] = []

    async def follow() -> None:
        url = f"{b}/threads/{session}/messages"
        body = {"content": "Tell me everything."}
        async with http.stream("POST", url, json=body, headers={**h, **SSE}) as response:
            path.append(response.headers["content-location"])
            async for event, data in sse_events(response):
                if event == "token":
                    first_token.set()
                elif event == "done":
                    done.set_result((time.monotonic(), str(data.get("status"))))
                    return

    reader = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(first_token.wait(), SEEN_TIMEOUT_S)
        await pause()
        sent = time.monotonic()
        r = await http.post(f"{a}{path[0]}/cancel", headers=h)
        answered = time.monotonic() - sent
        at, status = await asyncio.wait_for(done, SEEN_TIMEOUT_S)
        if r.status_code == 202 and status == "cancelled":
            return answered, at - sent
        return None
    except TimeoutError:
        return None
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def cancels(
    http: httpx.AsyncClient, a: str, b: str, secret: str, customer: str, tries: int, tag: str
) -> dict[str, Any]:
    h = bearer(secret, customer)
    seen: list[float] = []
    answered: list[float] = []
    failed = 0
    for i in range(tries):
        got = await cancel_once(http, a, b, h, f"{tag}-cancel-{i}")
        if got is None:
            failed += 1
        else:
            answered.append(got[0])
            seen.append(got[1])
    return summary(seen, answered, failed)


async def staff_messages(
    http: httpx.AsyncClient,
    a: str,
    b: str,
    secret: str,
    db_url: str,
    customer: str,
    tries: int,
    tag: str,
) -> dict[str, Any]:
    session = f"{tag}-staff"
    thread = queued_thread(db_url, customer, session)
    alice = bearer(secret, ALICE, staff=True)
    r = await http.post(
        f"{a}/staff/threads/{thread}/control",
        json={"action": "accept", "version": 1},
        headers=alice,
    )
    r.raise_for_status()
    arrivals: dict[str, float] = {}
    expected: dict[str, asyncio.Event] = {}
    listening = asyncio.Event()

    async def follow() -> None:
        headers = {**bearer(secret, customer), **SSE}
        url = f"{b}/threads/{session}/events"
        async with http.stream("GET", url, headers=headers) as response:
            listening.set()
            async for event, data in sse_events(response):
                if event == "message":
                    content = str(data.get("content"))
                    arrivals[content] = time.monotonic()
                    if content in expected:
                        expected[content].set()

    reader = asyncio.create_task(follow())
    seen: list[float] = []
    answered: list[float] = []
    failed = 0
    try:
        await asyncio.wait_for(listening.wait(), SEEN_TIMEOUT_S)
        await asyncio.sleep(0.5)  # the page is followed: B's feed polls this thread
        for i in range(tries):
            await pause()
            content = f"{tag} staff message {i}"
            expected[content] = asyncio.Event()
            sent = time.monotonic()
            r = await http.post(
                f"{a}/staff/threads/{thread}/messages",
                json={"content": content, "client_message_id": content},
                headers=alice,
            )
            answered.append(time.monotonic() - sent)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(expected[content].wait(), SEEN_TIMEOUT_S)
            if r.status_code == 200 and content in arrivals:
                seen.append(arrivals[content] - sent)
            else:
                failed += 1
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return summary(seen, answered, failed)


async def webhooks(
    http: httpx.AsyncClient,
    a: str,
    secret: str,
    db_url: str,
    receiver: Receiver,
    customer: str,
    tries: int,
    tag: str,
) -> dict[str, Any]:
    thread = queued_thread(db_url, customer, f"{tag}-hooks")
    holder, other = ALICE, BOB
    r = await http.post(
        f"{a}/staff/threads/{thread}/control",
        json={"action": "accept", "version": 1},
        headers=bearer(secret, holder, staff=True),
    )
    r.raise_for_status()
    version = int(r.json()["version"])
    seen: list[float] = []
    answered: list[float] = []
    failed = 0
    for _ in range(tries):
        await pause()
        sent = time.monotonic()
        r = await http.post(
            f"{a}/staff/threads/{thread}/control",
            json={"action": "transfer", "version": version, "to": other},
            headers=bearer(secret, holder, staff=True),
        )
        answered.append(time.monotonic() - sent)
        if r.status_code != 200:
            failed += 1
            break
        version = int(r.json()["version"])
        holder, other = other, holder
        at = await asyncio.to_thread(receiver.wait_for, thread, version, SEEN_TIMEOUT_S)
        if at is None:
            failed += 1
        else:
            seen.append(at - sent)
    return summary(seen, answered, failed)


async def measure(
    a: str,
    b: str,
    secret: str,
    db_url: str,
    receiver: Receiver,
    customers: list[str],
    tries: int,
    tag: str,
    log: Callable[[str], None],
) -> dict[str, Any]:
    timeout = httpx.Timeout(30.0, read=60.0)
    async with httpx.AsyncClient(timeout=timeout) as http:
        result = {
            "cancel": await cancels(http, a, b, secret, customers[0], tries, tag),
            "staff_message": await staff_messages(
                http, a, b, secret, db_url, customers[1], tries, tag
            ),
            "webhook": await webhooks(http, a, secret, db_url, receiver, customers[2], tries, tag),
        }
    for what, r in result.items():
        log(
            f"  {tag} {what:13s} p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms"
            f" ({r['seen']}/{r['tries']} seen)"
        )
    return result
