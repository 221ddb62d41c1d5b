"""The claim a run holds on its thread, as every layer that commits for the run sees it.

The run service claims a thread (a lease row with a generation number, app/runs/leases.py)
and sets `current_lease` for the run; the graph's tasks copy the context, so the
checkpointer and the write executor find it and fence their commits with it
(app/db/leases.py). A leaf module, so db, agent and runs can all import it.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    thread_id: str
    generation: int
    ttl_ms: int


class LeaseLost(Exception):
    """The run's claim on its thread passed to another run: it must stop, committing nothing.
    Never turned into a tool observation: it ends the run."""


current_lease: ContextVar[Lease | None] = ContextVar("current_lease", default=None)
