"""A turn: what one run of the graph carries besides the graph's state, in one object.

The run executor creates it when a run starts (app/runs/executor.py) and hands it to what
it calls: the checkpointer's blocks (`run_batching`, `prefetched`) and `stream_turn`. What
LangGraph calls cannot be handed it (the agent node, the checkpointer's reads and stores,
the write executor, the fence of every commit), so the executor also makes it the current
turn of the run's own task (`current_turn`), whose context the graph's tasks copy: one
object set once per run, read where it is needed, its fields changed in place.

A leaf module, so db, agent, actions and runs can all import it: the fields the layers
above define (the checkpointer's held rows and prefetched checkpoint) are typed here by
what the readers use of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from app.fencing import Lease, RunControl

TokenSink = Callable[[str, str], None]  # (a piece of the answer's text, the answer's id)
Batch = tuple[str, list[Any]]  # (a checkpoint statement, its rows)


class HeldSteps(Protocol):
    """The steps a run's checkpointer holds back (app/db/checkpointer.py, `HeldRows`)."""

    batches: list[Batch]
    keeps_every_write: bool

    async def store(self, *also: Batch) -> None: ...


class PrefetchedCheckpoint(Protocol):
    """The thread's newest checkpoint as the run's opening statement read it
    (app/db/checkpointer.py, `prefetched`)."""

    row: dict[str, Any] | None
    live: bool

    def answers(self, config: Any) -> bool: ...


@dataclass(slots=True, eq=False)
class Turn:
    """One run's state. `lease`: what its commits are fenced with (app/db/leases.py);
    `control`: how a cancel reaches the agent node and waits for a write; `tokens`: where
    the agent node hands the answer's text (else LangGraph's `custom` stream); `held`: the
    checkpoints held back until a write needs them; `prefetched`: the checkpoint its claim
    read. Outside a run (a person's message stored under a claim, tests driving a graph)
    the fields it has no use for stay None."""

    lease: Lease | None = None
    control: RunControl | None = None
    tokens: TokenSink | None = None
    held: HeldSteps | None = None
    prefetched: PrefetchedCheckpoint | None = None

    @contextmanager
    def current(self) -> Iterator[Turn]:
        """The block runs as this turn (what it calls finds it in `current_turn`)."""
        token = current_turn.set(self)
        try:
            yield self
        finally:
            current_turn.reset(token)


current_turn: ContextVar[Turn | None] = ContextVar("current_turn", default=None)


def current_control() -> RunControl | None:
    turn = current_turn.get()
    return turn.control if turn is not None else None


def writing() -> AbstractContextManager[None]:
    """A write of the current run: a cancel waits for it to finish (nothing outside a run)."""
    control = current_control()
    return control.write() if control is not None else nullcontext()


def current_lease() -> Lease | None:
    """The lease the current run's commits are fenced with (None outside a run)."""
    turn = current_turn.get()
    return turn.lease if turn is not None else None
