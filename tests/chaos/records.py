"""What the simulated customers were told, kept for the checker and the report.

Every client writes here and only here: the runs it read (each stream's Last-Event-ID and
the ids that came back), the turns acknowledged to it (`done` completed), the writes it
approved or declined, the threads it rewound or deleted, and every 5xx it got.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def now() -> float:
    return time.monotonic()


@dataclass
class StreamRead:
    """One HTTP stream of a run: where it asked to start, and the ids it got, in order."""

    after: int
    ids: list[int] = field(default_factory=list)


@dataclass
class RunSeen:
    location: str
    streams: list[StreamRead] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    done: dict[str, Any] | None = None
    expected: str | None = None  # the whole answer, when the model's is known in advance

    @property
    def run_id(self) -> str:
        return self.location.rsplit("/", 1)[-1]

    @property
    def last_id(self) -> int:
        return max((i for s in self.streams for i in s.ids), default=0)


@dataclass
class Turn:
    """A message the client was told was answered (`done` completed)."""

    thread: str
    session: str
    customer: str
    pool: str
    content: str


@dataclass
class Write:
    """An order the client asked to cancel, and what it told the service."""

    thread: str
    session: str
    customer: str
    pool: str
    order: str
    decision: str  # approve | reject | unconfirmed (a replica with confirmation off)


@dataclass
class Action:
    """An external write the client asked for (actions.py), and what it was told of it."""

    thread: str
    session: str
    customer: str
    tool: str
    arguments: dict[str, Any]  # as the model sends them (one number unique to the operation)
    decision: str  # approve | reject
    told: str = ""  # done | unknown | failed | "" (nothing said of it: an answer was lost)


@dataclass
class Http5xx:
    sent: float
    answered: float
    status: int
    method: str
    path: str
    body: str


@dataclass
class Leak:
    thread: str
    customer: str
    found: str  # the other customer's id, email or order id
    owner: str


@dataclass
class Records:
    started: float = field(default_factory=now)
    runs: list[tuple[str, RunSeen]] = field(default_factory=list)  # (thread, run)
    turns: list[Turn] = field(default_factory=list)
    superseded: set[tuple[str, str]] = field(default_factory=set)  # (thread, content)
    writes: list[Write] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    deleted: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # thread: (c, s, pool)
    held: set[str] = field(default_factory=set)  # threads a person accepted
    errors_5xx: list[Http5xx] = field(default_factory=list)
    leaks: list[Leak] = field(default_factory=list)
    completed_at: list[float] = field(default_factory=list)  # each `done` completed
    ops: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    events: Counter[str] = field(default_factory=Counter)  # 409s, cuts, follows, ...
    # What each client is waiting for now (for an operation that never finishes).
    waiting: dict[int, str] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)
