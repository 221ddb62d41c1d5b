"""Issue 44: a write whose COMMIT reply is lost. The service's path to Postgres goes through
the fault proxy (tests/chaos/netproxy.py), which forwards the write's COMMIT and throws the
server's answer away: the order is cancelled, the service never hears so, and the
connection goes silent until DB_CALL_DEADLINE_S cuts it.

The write ran once; what the service then says and does must follow what the database
holds, not what the broken connection suggests: the customer is told the order is
cancelled (not "nothing was changed"), and a retry with the same key finds the outcome
instead of running the write again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.netproxy import NetProxy
from tests.fakellm import Latency, ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import forks, running_runs
from tests.faults.conftest import service_env
from tests.faults.test_crash_around_writes import (  # noqa: F401 (fixtures, used by name)
    CancelPolicy,
    cancel_model,
    executions,
    pending_order,
    refund_rows,
    shop,
)
from tests.faults.test_net_blackhole import through

WRITE_RECORDED = b"INSERT INTO tool_executions"


@pytest.fixture(scope="module")
def proxy() -> Iterator[NetProxy]:
    with NetProxy(seed=4) as running:
        yield running


def heal_after_one_lost_reply(path: Any) -> threading.Thread:
    """The fault lasts for one reply: the look-ups after it go through."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while path.stats.lost_replies == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        path.heal()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def tool_results(state: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in state["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("confirmation", ["off", "required"])
def test_a_write_whose_commit_reply_is_lost_ran_once_and_is_told_as_done(
    shop: procs.PrivatePostgres,  # noqa: F811 (the imported fixture)
    cancel_model: ScriptedModelServer,  # noqa: F811
    proxy: NetProxy,
    auth_headers: Callable[[str], dict[str, str]],
    tmp_path: Path,
    confirmation: str,
) -> None:
    cancel_model.use(CancelPolicy(), latency=Latency())
    order_id, customer = pending_order(shop)
    refunds_before = refund_rows(shop, order_id)
    db = proxy.path(f"db lost commit {confirmation}", ("127.0.0.1", shop.port))
    env = service_env(
        through(db, shop),
        cancel_model,
        WRITE_CONFIRMATION=confirmation,
        DB_PREPARE_THRESHOLD="none",  # every statement's text on the wire, as behind PgBouncer
        DB_CALL_DEADLINE_S="3",
        THREAD_LEASE_TTL_S="3",
    )
    session = f"lost-commit-{confirmation}"
    thread = f"{customer}:{session}"
    headers = auth_headers(customer)
    message = {"content": f"please cancel order {order_id}", "client_message_id": "m-1"}
    with procs.ServiceProcess(env, log_dir=tmp_path) as svc:
        base = f"{svc.url}/threads/{session}"
        if confirmation == "required":
            paused = httpx.post(base + "/messages", json=message, headers=headers, timeout=60)
            assert paused.json()["status"] == "interrupted", paused.text
            target, body = base + "/resume", {"decision": "approve"}
        else:
            target, body = base + "/messages", message
        db.lost_reply(match=b"COMMIT", after=WRITE_RECORDED)
        healer = heal_after_one_lost_reply(db)
        first = httpx.post(target, json=body, headers=headers, timeout=90)
        healer.join(timeout=5)
        assert db.stats.lost_replies == 1  # the write's COMMIT did go out, and was answered
        assert executions(shop, thread) == 1
        assert first.status_code == 200, first.text

        # What the database holds is what the customer is told: the order is cancelled.
        state = httpx.get(base + "/state", headers=headers, timeout=10).json()
        results = tool_results(state)
        assert results, state
        assert not any(r.startswith("Error:") for r in results), results
        assert shop.query("SELECT status FROM orders WHERE id = %s", (order_id,)) == [
            ("cancelled",)
        ]

        # The customer asks again (same message id, then a new message): nothing runs again.
        again = httpx.post(base + "/messages", json=message, headers=headers, timeout=60)
        assert again.status_code == 200, again.text
        more = {"content": f"please cancel order {order_id}", "client_message_id": "m-2"}
        later = httpx.post(base + "/messages", json=more, headers=headers, timeout=60)
        assert later.status_code == 200, later.text
        if later.json().get("status") == "interrupted":  # asked again: approve it too
            approved = httpx.post(
                base + "/resume", json={"decision": "approve"}, headers=headers, timeout=60
            )
            assert approved.status_code == 200, approved.text

    ok = shop.query("SELECT count(*) FROM audit_log WHERE thread_id = %s AND ok", (thread,))
    assert ok == [(1,)]  # one successful write; the second ask was refused by the rule
    assert refund_rows(shop, order_id) == refunds_before + 1
    assert forks(shop, thread) == []
    assert running_runs(shop, thread) == 0
