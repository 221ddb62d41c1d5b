"""What every fault test asserts of a thread once the dust settles, and how it waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.faults import procs


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def forks(pg: procs.PrivatePostgres, thread: str) -> list[tuple[Any, ...]]:
    """Checkpoints of the thread with two children: a second writer got in."""
    return pg.query(
        "SELECT parent_checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''"
        " AND parent_checkpoint_id IS NOT NULL GROUP BY 1 HAVING count(*) > 1",
        (thread,),
    )


def running_runs(pg: procs.PrivatePostgres, thread: str) -> int:
    rows = pg.query(
        "SELECT count(*) FROM runs WHERE thread_id = %s AND status = 'running'", (thread,)
    )
    return int(rows[0][0])
