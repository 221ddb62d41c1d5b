"""What the layers that commit for a run must know of it: the claim it holds on its thread
(the lease), and whether it is inside a write (which a cancel waits for).

The run service claims a thread (a lease row with a generation number, app/runs/leases.py);
the run's turn carries the lease and the control (app/turn.py), so the checkpointer and the
write executor find them and fence their commits with the lease (app/db/leases.py). A leaf
module, so db, agent and runs can all import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    thread_id: str
    generation: int
    run_id: str
    ttl_ms: int


class LeaseLost(Exception):
    """The run's claim on its thread passed to another run: it must stop, committing nothing.
    Never turned into a tool observation: it ends the run."""


@dataclass
class RunControl:
    """How a run is stopped without breaking anything. A cancel sets `stop_requested`; the
    agent node sees it at the next step boundary or between two chunks of the model's
    stream, and ends the turn there with the answer cut where it was. A write under way is
    never interrupted (`writing`): the run stops after it has recorded its outcome."""

    writing: int = 0
    stop_requested: bool = False
    on_idle: Callable[[], None] | None = None

    @contextmanager
    def write(self) -> Iterator[None]:
        self.writing += 1
        try:
            yield
        finally:
            self.writing -= 1
            if self.writing == 0 and self.on_idle is not None:
                stop, self.on_idle = self.on_idle, None
                stop()
