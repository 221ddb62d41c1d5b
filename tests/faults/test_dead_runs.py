"""A run whose process died, on a thread nobody claims again, does not stay `running`.

Found by the chaos soak: only the thread's next claim closed a dead process's run, so a
thread its customer left kept a run `running` and a lease naming it for good. Every replica
now sweeps such runs once their lease has been expired for a further TTL. The thread's
next message must still finish the step the dead run left (here an unconfirmed write that
was waiting on a row lock when its process was killed): once, before the new message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.fakellm import Latency, ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import forks, running_runs, wait_for
from tests.faults.conftest import service_env
from tests.faults.test_crash_around_writes import (
    CancelPolicy,
    cancel_model,  # noqa: F401  (a fixture)
    executions,
    order_row_locked,
    pending_order,
    post_in_background,
    post_until_free,
    shop,  # noqa: F401  (a fixture)
    write_is_waiting,
)

LEASE_TTL_S = 1.0


def lease_row(pg: procs.PrivatePostgres, thread: str) -> tuple[Any, ...]:
    rows = pg.query("SELECT run_id, dead_run FROM thread_leases WHERE thread_id = %s", (thread,))
    return tuple(rows[0])


def run_statuses(pg: procs.PrivatePostgres, thread: str) -> list[str]:
    rows = pg.query("SELECT status FROM runs WHERE thread_id = %s ORDER BY created_at", (thread,))
    return [str(r[0]) for r in rows]


def test_a_dead_process_run_is_closed_by_another_replica_and_its_step_finished_later(
    shop: procs.PrivatePostgres,  # noqa: F811
    cancel_model: ScriptedModelServer,  # noqa: F811
    auth_headers: Callable[[str], dict[str, str]],
    tmp_path: Any,
) -> None:
    order_id, customer = pending_order(shop)
    session = "dead-run-swept"
    thread = f"{customer}:{session}"
    env = service_env(
        shop.url,
        cancel_model,
        WRITE_CONFIRMATION="off",
        THREAD_LEASE_TTL_S=str(LEASE_TTL_S),
    )
    headers = auth_headers(customer)
    message = {"content": f"please cancel order {order_id}", "client_message_id": "m-1"}
    with procs.ServiceProcess(env, log_dir=tmp_path) as other:
        with (
            procs.ServiceProcess(env, log_dir=tmp_path) as dying,
            order_row_locked(shop, order_id),
        ):
            post_in_background(dying.url + f"/threads/{session}/messages", message, headers)
            wait_for(lambda: write_is_waiting(shop), "the write to wait on the row lock")
            dead_run = lease_row(shop, thread)[0]
            assert dead_run is not None
            dying.kill9()
        assert executions(shop, thread) == 0
        cancel_model.use(CancelPolicy(), latency=Latency())

        # Nobody touches the thread: the surviving replica closes the run and frees the
        # lease within about three TTLs, keeping the dead run's id for the next claim.
        wait_for(
            lambda: run_statuses(shop, thread) == ["abandoned"],
            "the other replica to close the dead run",
            timeout_s=10 * LEASE_TTL_S + 5,
        )
        assert lease_row(shop, thread) == (None, dead_run)

        # The customer comes back with a new message: the write the dead run had begun
        # runs now, once, and the new message is answered after it.
        base = other.url + f"/threads/{session}"
        later = {"content": "is it done?", "client_message_id": "m-2"}
        answered = post_until_free(base + "/messages", later, headers)
        assert answered.status_code == 200, answered.text
        assert answered.json()["status"] == "completed"
        state = httpx.get(base + "/state", headers=headers, timeout=10).json()
        said = [m["content"] for m in state["messages"] if m["role"] == "user"]
        assert said == [message["content"], later["content"]]
        assert state["pending"] is None and state["next"] == []

    assert executions(shop, thread) == 1
    assert shop.query("SELECT status FROM orders WHERE id = %s", (order_id,)) == [("cancelled",)]
    assert forks(shop, thread) == []
    assert running_runs(shop, thread) == 0
    assert lease_row(shop, thread)[1] is None  # the claim took the dead run over
