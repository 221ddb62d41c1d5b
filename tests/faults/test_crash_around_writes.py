"""kill -9 around a write, with confirmation on and off: the write runs exactly once.

Each case starts the service as a real process on a private Postgres, kills it at one point
around a write (blocked before its commit on a row lock the test holds, or after the commit
while the model writes the answer), starts a new process on the same database and does
what a client does next: retries its message with the same client_message_id, or approves
again. The database must then show the write once, the message once, no fork in the
checkpoint chain and no run left running.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.fakellm import ChatRequest, Latency, OrderLookupPolicy, Reply, ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import forks, running_runs, wait_for
from tests.faults.conftest import service_env

LEASE_TTL_S = "2"
ANSWER = "Done: the order is cancelled and the refund is on its way to you. " * 3


class CancelPolicy:
    """Cancels the order the customer names, then answers (slowly, under a latency)."""

    def __call__(self, request: ChatRequest) -> Reply:
        if request.pending_tool_results():
            return Reply.say(ANSWER)
        order = re.search(r"#W\d+", request.last_user_text())
        if order and "cancel" in request.last_user_text():
            return Reply.call(
                "cancel_pending_order", order_id=order.group(0), reason="ordered by mistake"
            )
        return Reply.say("How can I help?")


@pytest.fixture(scope="module")
def shop(private_postgres: procs.PrivatePostgres) -> procs.PrivatePostgres:
    """The demo shop on the private cluster."""
    env = {**os.environ, "DATABASE_URL": private_postgres.url, "PYTHONPATH": str(procs.APP_ROOT)}
    subprocess.run(
        [sys.executable, "-m", "app", "seed", "--replace"], env=env, check=True, capture_output=True
    )
    return private_postgres


@pytest.fixture
def cancel_model(fault_model: ScriptedModelServer) -> Iterator[ScriptedModelServer]:
    fault_model.use(CancelPolicy(), latency=Latency(tokens_per_s=6))
    yield fault_model
    fault_model.use(OrderLookupPolicy(), latency=Latency())


_taken: set[str] = set()


def pending_order(pg: procs.PrivatePostgres) -> tuple[str, str]:
    """A pending order no other case of this module has used: (order id, customer id)."""
    rows = pg.query("SELECT id, customer_id FROM orders WHERE status = 'pending' ORDER BY id")
    for order_id, customer_id in rows:
        if order_id not in _taken:
            _taken.add(order_id)
            return str(order_id), str(customer_id)
    raise AssertionError("the seed shop ran out of pending orders")


def post_in_background(url: str, body: dict[str, Any], headers: dict[str, str]) -> threading.Thread:
    """An SSE request left hanging; the process under it is about to die."""

    def run() -> None:
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
            for _ in response.iter_bytes():
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def post_until_free(url: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    """What a client does after a crash: retry while the dead process's lease runs out."""
    deadline = time.monotonic() + 30
    while True:
        response = httpx.post(url, json=body, headers=headers, timeout=60)
        if response.status_code != 409 or time.monotonic() > deadline:
            return response
        time.sleep(0.3)


def executions(pg: procs.PrivatePostgres, thread: str) -> int:
    return int(
        pg.query("SELECT count(*) FROM tool_executions WHERE thread_id = %s", (thread,))[0][0]
    )


def assert_clean(pg: procs.PrivatePostgres, thread: str, order_id: str) -> None:
    """Exactly one write, one refund, no fork, no run still running."""
    assert executions(pg, thread) == 1
    assert pg.query("SELECT status FROM orders WHERE id = %s", (order_id,)) == [("cancelled",)]
    refunds = pg.query(
        "SELECT count(*) FROM payment_transactions"
        " WHERE order_id = %s AND transaction_type = 'refund'",
        (order_id,),
    )
    assert refunds[0][0] >= 1
    audit = pg.query("SELECT count(*) FROM audit_log WHERE thread_id = %s AND ok", (thread,))
    assert audit == [(1,)]
    assert forks(pg, thread) == []
    assert running_runs(pg, thread) == 0


def refund_rows(pg: procs.PrivatePostgres, order_id: str) -> int:
    return int(
        pg.query(
            "SELECT count(*) FROM payment_transactions"
            " WHERE order_id = %s AND transaction_type = 'refund'",
            (order_id,),
        )[0][0]
    )


@contextlib.contextmanager
def order_row_locked(pg: procs.PrivatePostgres, order_id: str) -> Iterator[None]:
    with psycopg.connect(pg.url) as conn:
        conn.execute("SELECT 1 FROM orders WHERE id = %s FOR UPDATE", (order_id,))
        yield
        conn.rollback()


def write_is_waiting(pg: procs.PrivatePostgres) -> bool:
    rows = pg.query(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND query ILIKE '%%orders%%'"
    )
    return bool(rows[0][0])


@pytest.mark.parametrize("confirmation", ["off", "required"])
@pytest.mark.parametrize("kill_at", ["before_commit", "after_commit"])
def test_a_write_runs_exactly_once_through_a_kill(
    shop: procs.PrivatePostgres,
    cancel_model: ScriptedModelServer,
    auth_headers: Callable[[str], dict[str, str]],
    tmp_path: Any,
    confirmation: str,
    kill_at: str,
) -> None:
    order_id, customer = pending_order(shop)
    refunds_before = refund_rows(shop, order_id)
    session = f"crash-{kill_at}-{confirmation}"
    thread = f"{customer}:{session}"
    env = service_env(
        shop.url, cancel_model, WRITE_CONFIRMATION=confirmation, THREAD_LEASE_TTL_S=LEASE_TTL_S
    )
    headers = auth_headers(customer)
    message = {"content": f"please cancel order {order_id}", "client_message_id": "m-1"}
    with procs.ServiceProcess(env, log_dir=tmp_path) as first:
        base = first.url + f"/threads/{session}"
        if confirmation == "required":
            paused = httpx.post(
                base + "/messages", json=message, headers=headers, timeout=60
            ).json()
            assert paused["status"] == "interrupted"
            target, body = base + "/resume", {"decision": "approve"}
        else:
            target, body = base + "/messages", message
        with (
            order_row_locked(shop, order_id)
            if kill_at == "before_commit"
            else contextlib.nullcontext()
        ):
            post_in_background(target, body, headers)
            if kill_at == "before_commit":
                wait_for(lambda: write_is_waiting(shop), "the write to wait on the row lock")
            else:
                wait_for(lambda: executions(shop, thread) == 1, "the write to commit")
                time.sleep(0.5)  # the model is writing the answer now
            first.kill9()
        cancel_model.use(CancelPolicy(), latency=Latency())  # the retry need not be slow
        assert executions(shop, thread) == (0 if kill_at == "before_commit" else 1)

    with procs.ServiceProcess(env, log_dir=tmp_path) as second:
        base = second.url + f"/threads/{session}"
        target = base + ("/resume" if confirmation == "required" else "/messages")
        retried = post_until_free(target, body, headers)
        assert retried.status_code == 200, retried.text
        assert retried.json()["status"] == "completed"
        state = httpx.get(base + "/state", headers=headers, timeout=10).json()
        said = [m for m in state["messages"] if m["role"] == "user"]
        assert [m["content"] for m in said] == [message["content"]]  # stored once
        assert state["pending"] is None and state["next"] == []
        # A second retry replays; nothing runs again.
        again = httpx.post(base + "/messages", json=message, headers=headers, timeout=60)
        assert again.status_code == 200

    assert_clean(shop, thread, order_id)
    assert refund_rows(shop, order_id) == refunds_before + 1
