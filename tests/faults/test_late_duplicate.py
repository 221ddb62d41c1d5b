"""A late copy of a message never brings a deleted conversation back.

Found by the chaos soak: a thread's first message was held up inside one replica (it had
stalled, SIGSTOP); the client, cut off by the balancer, sent the message again (same
client_message_id) to another replica, had its answer, and deleted the thread (204). Then
the held-up copy went on, and started the old message as a new conversation: the deleted
thread was back, with a run. Here the copy is held up on a row lock its opening statement
needs (the post rate's row, which only that replica checks); it must then answer
`409 message_deleted` and leave nothing behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import psycopg

from tests.fakellm import ScriptedModelServer
from tests.faults import procs
from tests.faults.checks import wait_for
from tests.faults.conftest import service_env


def rows_of(pg: procs.PrivatePostgres, thread: str) -> int:
    rows = pg.query(
        "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %s)"
        " + (SELECT count(*) FROM runs WHERE thread_id = %s)"
        " + (SELECT count(*) FROM threads WHERE thread_id = %s)",
        (thread, thread, thread),
    )
    return int(rows[0][0])


def waiting_on_locks(pg: procs.PrivatePostgres) -> int:
    rows = pg.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    return int(rows[0][0])


def test_a_message_held_up_in_a_replica_does_not_bring_its_deleted_thread_back(
    private_postgres: procs.PrivatePostgres,
    fault_model: ScriptedModelServer,
    auth_headers: Callable[[str], dict[str, str]],
    tmp_path: Any,
) -> None:
    customer, session = "cust_late", "late-duplicate"
    thread = f"{customer}:{session}"
    headers = auth_headers(customer)
    message = {"content": "hello there", "client_message_id": "m-1"}
    pg = private_postgres
    env = service_env(pg.url, fault_model)
    late: list[int] = []

    def post_late(url: str) -> None:
        try:
            response = httpx.post(url, json=message, headers=headers, timeout=60)
            late.append(response.status_code)
        except httpx.HTTPError:
            late.append(0)

    with (
        procs.ServiceProcess(env, log_dir=tmp_path) as held_up,
        procs.ServiceProcess(
            {**env, "RATE_LIMIT_POSTS_PER_MINUTE": "0"}, log_dir=tmp_path
        ) as other,
        psycopg.connect(pg.url) as lock,
    ):
        lock.execute(
            "INSERT INTO rate_limits (key, tat) VALUES (%s, now()) ON CONFLICT DO NOTHING",
            (f"posts:{customer}",),
        )
        lock.commit()
        lock.execute("SELECT 1 FROM rate_limits WHERE key = %s FOR UPDATE", (f"posts:{customer}",))
        sender = threading.Thread(
            target=post_late, args=(held_up.url + f"/threads/{session}/messages",), daemon=True
        )
        sender.start()
        wait_for(lambda: waiting_on_locks(pg) == 1, "the first copy to be held up")

        # The client, cut off, sends it again elsewhere, has its answer, deletes the thread.
        base = other.url + f"/threads/{session}"
        answered = httpx.post(base + "/messages", json=message, headers=headers, timeout=30)
        assert answered.status_code == 200 and answered.json()["status"] == "completed"
        assert httpx.delete(base, headers=headers, timeout=30).status_code == 204
        assert rows_of(pg, thread) == 0

        lock.rollback()  # the held-up copy goes on now
        sender.join(timeout=30)
        assert late == [409]
        assert rows_of(pg, thread) == 0
        assert httpx.get(base + "/state", headers=headers, timeout=10).status_code == 404

        # A new conversation under the same id, with a new message id, is fine; on it, the
        # old id is a message like any other.
        fresh = {"content": "hello again", "client_message_id": "m-2"}
        again = httpx.post(base + "/messages", json=fresh, headers=headers, timeout=30)
        assert again.status_code == 200 and again.json()["status"] == "completed"
        repeated = httpx.post(base + "/messages", json=message, headers=headers, timeout=30)
        assert repeated.status_code == 200 and repeated.json()["status"] == "completed"
