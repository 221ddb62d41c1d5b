"""Who answers a thread, and what a person who took it over does in it.

A thread is in `agent` control (the default), `queued` (handed off, waiting for a person)
or `human` (a named staff member holds it). Each change is compare-and-set on the thread's
control version (`cs_control`, app/migrations/versions/0011): a stale console gets 409
`control_conflict`, and of two people accepting at once exactly one wins. While a person
holds the thread, the customer's messages and the person's are stored in the conversation
with no run and no model call (app/runs/surgery.py, `store_messages`); the note a person
hands back with is stored the same way, for the agent to read on the next turn.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import structlog
from langchain_core.messages import HumanMessage
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.agent.edits import STAFF_AUTHOR
from app.agent.graph import Graph, run_config
from app.config import Settings
from app.errors import Conflict, ThreadBusy
from app.identity import Principal
from app.metrics import Metrics
from app.runs.leases import ThreadLeases
from app.runs.surgery import store_messages
from app.turn import Turn, current_turn

log = structlog.get_logger(__name__)


STAFF_MESSAGE_NAMESPACE = uuid.UUID("0c6f2f38-4a39-4f7e-9a8e-3f0f7b7a5d21")

_CHANGE = "SELECT * FROM cs_control(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_QUEUE = """SELECT l.thread_id, l.control, l.control_version, l.assignee, l.assignee_name,
        l.control_summary, l.control_reason, l.control_since, t.user_id, t.session_id,
        t.title, t.updated_at, t.metadata->>'channel' AS channel,
        t.metadata->>'channel_link' AS channel_link,
        (SELECT e.data FROM thread_events e WHERE e.thread_id = l.thread_id
           AND e.kind = 'message' ORDER BY e.id DESC LIMIT 1) AS last_message
    FROM thread_leases l JOIN threads t ON t.thread_id = l.thread_id
    WHERE {where} AND (l.control_since, l.thread_id) > (%(since)s, %(after)s)
    ORDER BY l.control_since, l.thread_id LIMIT %(limit)s"""
_WHERE = {
    "queued": "l.control = 'queued'",
    "mine": "l.control = 'human' AND l.assignee = %(staff)s",
    "human": "l.control = 'human'",
    "all": "l.control <> 'agent'",
}
_QUEUES = {which: _QUEUE.format(where=where) for which, where in _WHERE.items()}


def control_view(row: dict[str, Any] | None, thread_id: str) -> dict[str, Any]:
    if row is None:
        row = {"control": "agent", "control_version": 0}
    since: datetime | None = row.get("control_since")
    return {
        "thread_id": thread_id,
        "state": row["control"],
        "version": int(row["control_version"]),
        "assignee": row.get("assignee"),
        "assignee_name": row.get("assignee_name"),
        "summary": row.get("control_summary"),
        "reason": row.get("control_reason"),
        "since": since.isoformat() if since else None,
    }


def staff_message(staff: Principal, content: str, message_id: str) -> HumanMessage:
    return HumanMessage(
        content=content,
        id=message_id,
        name=staff.user_id,
        additional_kwargs={"author": STAFF_AUTHOR, "author_name": staff.display_name},
    )


def release_note(staff: Principal, note: str) -> HumanMessage:
    return HumanMessage(
        content=note,
        id=str(uuid.uuid4()),
        name=staff.user_id,
        additional_kwargs={
            "author": STAFF_AUTHOR,
            "author_name": staff.display_name,
            "kind": "note",
        },
    )


class Controls:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        graph: Graph,
        leases: ThreadLeases,
        settings: Settings,
        cancel: Callable[[str, str], Awaitable[None]],
        metrics: Metrics,
    ) -> None:
        self.metrics = metrics
        self.pool = pool
        self.graph = graph
        self.leases = leases
        self.settings = settings
        self.cancel = cancel  # stops a thread's run in progress, on whichever replica

    async def get(self, thread_id: str) -> dict[str, Any]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM thread_leases WHERE thread_id = %s", (thread_id,)
            )
            return control_view(await cur.fetchone(), thread_id)

    async def change(
        self,
        thread_id: str,
        action: str,
        version: int,
        staff: Principal,
        *,
        to: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """One change of control by `staff`; Conflict on a stale version or an action the
        state does not allow. A take-over stops the agent's run in progress (a write under
        way completes first); a release stores the note for the agent."""
        params = (thread_id, action, version, staff.user_id, staff.display_name, to, to, note)
        before = await self.get(thread_id)  # for the metrics: how long its state lasted
        async with self.pool.connection() as conn:
            cur = await conn.execute(_CHANGE, (*params, None, None))
            row = await cur.fetchone()
            if row is None:
                raise Conflict(
                    "the conversation changed hands meanwhile, or that action is not "
                    "allowed now; reload it",
                    code="control_conflict",
                )
            view = control_view(row, thread_id)
            await self.event(conn, thread_id, "control", view)
        since = before["since"]
        waited = None if since is None else (row["control_since"] - datetime.fromisoformat(since))
        self.metrics.control_changed(action, None if waited is None else waited.total_seconds())
        if action == "take_over" and row["run_id"] is not None:
            try:
                await self.cancel(thread_id, row["run_id"])
            except Exception:  # it ended meanwhile: nothing to stop
                log.info("no run to stop at a take-over", thread_id=thread_id)
        if view["state"] == "agent":  # handed back (with its note, if any)
            notes = [release_note(staff, note)] if note else []
            await self.store(thread_id, notes, handed_back=True)
        return view

    async def staff_says(
        self, thread_id: str, staff: Principal, content: str, client_message_id: str | None
    ) -> dict[str, Any]:
        """A message from the person who holds the thread (only they may write)."""
        control = await self.get(thread_id)
        if control["state"] != "human" or control["assignee"] != staff.user_id:
            raise Conflict(
                "only the person holding the conversation writes in it", code="control_conflict"
            )
        key = client_message_id or str(uuid.uuid4())
        message_id = str(uuid.uuid5(STAFF_MESSAGE_NAMESPACE, f"{thread_id}\n{key}"))
        await self.store(thread_id, [staff_message(staff, content, message_id)])
        view = {
            "id": message_id,
            "author": STAFF_AUTHOR,
            "name": staff.display_name,
            "content": content,
        }
        async with self.pool.connection() as conn:
            await self.event(conn, thread_id, "message", view)
        return view

    async def store(
        self, thread_id: str, messages: list[HumanMessage], *, handed_back: bool = False
    ) -> None:
        """Messages into the conversation under the thread's lease (fenced, as a run's)."""
        claim = await self.leases.claim(thread_id, f"staff-{uuid.uuid4()}")
        if claim is None:
            raise ThreadBusy(retry_after_s=1)
        token = current_turn.set(Turn(lease=claim.lease))
        try:
            await store_messages(
                self.graph, run_config(thread_id, self.settings), messages, handed_back=handed_back
            )
        finally:
            current_turn.reset(token)
            await self.leases.release(claim.lease)

    @staticmethod
    async def event(conn: Any, thread_id: str, kind: str, data: dict[str, Any]) -> None:
        await conn.execute(
            "INSERT INTO thread_events (thread_id, kind, data) VALUES (%s, %s, %s)",
            (thread_id, kind, Jsonb(data)),
        )

    async def queue(
        self,
        which: str,
        staff: Principal,
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> list[dict[str, Any]]:
        """Threads waiting or held, oldest first."""
        since, after_id = after or (datetime.min.replace(year=1970), "")
        params = {"staff": staff.user_id, "since": since, "after": after_id, "limit": limit}
        async with self.pool.connection() as conn:
            cur = await conn.execute(_QUEUES[which], params)
            rows: list[dict[str, Any]] = await cur.fetchall()
        return rows

    async def history(self, thread_id: str) -> list[dict[str, Any]]:
        """Each change of control, oldest first, with the names the staff signed in with
        (`actor_name`, `assignee_name`): the history keeps ids, the control event of the same
        version keeps the name of whoever held the thread after it."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(_HISTORY, (thread_id,))
            rows: list[dict[str, Any]] = await cur.fetchall()
        return [_named(r) for r in rows]


_HISTORY = """SELECT h.version, h.action, h.actor,
        coalesce(lag(h.control) OVER w, 'agent') AS "from", h.control AS "to", h.assignee,
        h.note, h.at, e.name AS assignee_name,
        lag(h.assignee) OVER w AS held_by, lag(e.name) OVER w AS held_by_name
    FROM control_history h
    LEFT JOIN LATERAL (
        SELECT ev.data->>'assignee_name' AS name FROM thread_events ev
        WHERE ev.thread_id = h.thread_id AND ev.kind = 'control'
          AND ev.data->>'version' = h.version::text
        ORDER BY ev.id DESC LIMIT 1) e ON true
    WHERE h.thread_id = %s
    WINDOW w AS (ORDER BY h.id)
    ORDER BY h.id"""


def _named(row: dict[str, Any]) -> dict[str, Any]:
    """A history row with the actor's name: the person it went to (accept, take over) or
    the one who held it before (transfer, release); None for the assistant."""
    held_by, held_by_name = row.pop("held_by"), row.pop("held_by_name")
    actor = row["actor"]
    if actor == row["assignee"]:
        actor_name = row["assignee_name"]
    elif actor == held_by:
        actor_name = held_by_name
    else:
        actor_name = None
    return {**row, "actor_name": actor_name, "at": row["at"].isoformat()}
