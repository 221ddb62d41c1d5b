"""The expected final data of a task: its gold actions applied to the fresh shop by the
project's own write tools (their specs build the actions, over the domain rules), inside a
transaction that is rolled back. A gold action our rules refuse makes the task
unsolvable-by-policy: no agent that follows our rules can reach tau-bench's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from app.db.transfer import TauData, TransferError, import_data
from app.db.writes import WriteAction
from app.domain.errors import RuleViolation
from app.eval.snapshot import Snapshot, diff, read_snapshot
from app.eval.taskdata import overlay, start_data
from app.eval.tasks import Action, Task
from app.tools.registry import SPECS, WRITE_TOOL_NAMES
from app.tools.spec import ToolSpec
from app.tools.writing import Session

# tau-bench tools this service does not have, which change nothing either.
NOT_OURS = frozenset({"think"})


def no_data_change(specs: Mapping[str, ToolSpec]) -> frozenset[str]:
    """Tools that change nothing tau-bench compares, read from their specs: the reads, and
    the writes the customer is not asked to approve because they change no data (the
    hand-over: a ticket for the humans, not shop data)."""
    return NOT_OURS | {
        name for name, spec in specs.items() if spec.access == "read" or not spec.asks
    }


NO_DATA_CHANGE = no_data_change(SPECS)


@dataclass(frozen=True)
class Gold:
    snapshot: Snapshot | None  # None when unsolvable
    refused: str | None = None  # why our rules refuse a gold action
    # A recorded task's records at its start, against the fresh data (None: the fresh data).
    start: Snapshot | None = None

    @property
    def solvable(self) -> bool:
        return self.snapshot is not None


async def gold_state(
    conn: AsyncConnection[Any], task: Task, fresh: Snapshot, shop: TauData | None = None
) -> Gold:
    """On a fresh shop (`shop`, with a recorded task's own records put in): apply the task's
    writes as the task's customer, read the result, and roll it all back. A recorded task's
    gold must also equal the records its conversation left: when the rules have changed
    since, it cannot, and the task is listed apart."""
    data = start_data(shop, task) if shop is not None else None
    async with conn.transaction(force_rollback=True):
        start = await _load(conn, data, fresh) if data is not None else None
        if isinstance(start, str):
            return Gold(None, start)
        for index, action in enumerate(task.actions):
            refused = await _apply(conn, task.user_id, action)
            if refused is not None:
                return Gold(None, f"action {index + 1} {action.name}: {refused}", start)
        gold = await read_snapshot(conn, fresh)
    records = (task.expected or {}).get("records") or {}
    if data is None or not (records.get("users") or records.get("orders")):
        return Gold(gold, start=start)
    async with conn.transaction(force_rollback=True):
        recorded = await _load(conn, overlay(data, records), fresh)
    if isinstance(recorded, str):
        return Gold(None, f"the recorded outcome: {recorded}", start)
    rows = diff(gold, recorded, fresh)
    if rows:
        lines = "; ".join(d.describe() for d in rows[:3])
        return Gold(None, f"the gold actions no longer give the recorded outcome: {lines}", start)
    return Gold(gold, start=start)


async def _load(conn: AsyncConnection[Any], data: TauData, fresh: Snapshot) -> Snapshot | str:
    """`data` loaded in place of the shop (in the caller's transaction), read against the
    fresh data; or why it cannot be loaded."""
    try:
        await import_data(conn, data, replace=True)
    except TransferError as refused:
        return refused.message
    return await read_snapshot(conn, fresh)


async def _apply(conn: AsyncConnection[Any], customer_id: str, action: Action) -> str | None:
    if action.name in NO_DATA_CHANGE:
        return None
    if action.name not in WRITE_TOOL_NAMES:
        return "this service has no such tool"
    try:
        write = _write_action(customer_id, action.name, action.kwargs)
    except (KeyError, TypeError, ValueError) as error:
        return f"arguments this tool does not take ({type(error).__name__}: {error})"
    try:
        async with conn.transaction():  # a savepoint: a refused rule leaves nothing behind
            await write(conn)
    except RuleViolation as refused:
        return refused.message
    return None


def _write_action(customer_id: str, name: str, kw: Mapping[str, Any]) -> WriteAction:
    """The tool's own action, for its arguments as its schema validates them (a
    ValidationError is a ValueError)."""
    spec = SPECS[name]
    validated = spec.args_schema.model_validate(dict(kw))
    args = {k: getattr(validated, k) for k in spec.arguments()}
    return spec.action(Session(customer_id, thread_id=""), args)
