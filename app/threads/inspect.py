"""Reading, rewinding and deleting a thread's checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from app.agent.graph import Graph
from app.agent.model_view import text_of
from app.agent.views import message_view, shorten
from app.db.erase import KeepOutcomes
from app.errors import NotFound, ThreadBusy, thread_not_found
from app.runs.leases import ThreadLeases
from app.runs.repository import RunRepository
from app.threads.archive import PgTranscriptArchive
from app.turn import Turn, current_turn

HISTORY_PAGE = 16  # checkpoints a page: a turn is 3 to 5


def _config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint_id(config: RunnableConfig | None) -> str | None:
    if not config:
        return None
    value = config.get("configurable", {}).get("checkpoint_id")
    return str(value) if value else None


class ThreadInspector:
    def __init__(
        self,
        graph: Graph,
        leases: ThreadLeases,
        repo: RunRepository,
        archive: PgTranscriptArchive,
        keep: KeepOutcomes | None = None,
    ) -> None:
        self.archive = archive
        self.keep = keep  # stores a deleted thread's outcome first (analytics)
        self.graph = graph
        self.leases = leases
        self.repo = repo

    @asynccontextmanager
    async def _holding(self, thread_id: str, what: str) -> AsyncIterator[None]:
        """The thread's claim for one operation (as a run has it: nothing else writes the
        thread meanwhile, and what the block commits is fenced)."""
        claim = await self.leases.claim(thread_id, f"{what}-{uuid.uuid4()}")
        if claim is None:
            raise ThreadBusy()
        token = current_turn.set(Turn(lease=claim.lease))
        try:
            yield
        finally:
            current_turn.reset(token)
            await self.leases.release(claim.lease)

    async def require_thread(self, thread_id: str) -> dict[str, Any]:
        row = await self.repo.thread(thread_id)
        if row is None:
            raise thread_not_found()
        return row

    def _base_view(
        self, snapshot: StateSnapshot, session_id: str, role: str, user_id: str
    ) -> dict[str, Any]:
        values = snapshot.values or {}
        verified = values.get("verified_user_id") or (user_id if role == "customer" else None)
        view: dict[str, Any] = {
            "id": session_id,
            "checkpoint_id": _checkpoint_id(snapshot.config),
            "parent_checkpoint_id": _checkpoint_id(snapshot.parent_config),
            "next": list(snapshot.next),
            "messages": [message_view(m) for m in values.get("messages", [])],
            "verified_user_id": verified,
            "handed_off": bool(values.get("handed_off")),
            "breakers": values.get("breakers", {}),
            "citations": values.get("citations", []),
            "created_at": snapshot.created_at,
        }
        pending = [
            p
            for i in snapshot.interrupts
            if isinstance(i.value, dict)
            for p in i.value.get("pending", [])
        ]
        if pending:
            view["pending"] = pending
        return view

    async def state(
        self,
        thread_id: str,
        session_id: str,
        role: str,
        user_id: str,
        checkpoint_id: str | None,
        *,
        working: bool = False,
    ) -> dict[str, Any]:
        """The full transcript (archive + working messages), or only the working window."""
        row = await self.require_thread(thread_id)
        snapshot = await self.graph.aget_state(_config(thread_id, checkpoint_id))
        if checkpoint_id and snapshot.created_at is None:
            raise NotFound("checkpoint not found", code="checkpoint_not_found")
        view = await self._view(snapshot, thread_id, session_id, role, user_id, working=working)
        view["channel"] = channel_of(row)
        return view

    async def _view(
        self,
        snapshot: StateSnapshot,
        thread_id: str,
        session_id: str,
        role: str,
        user_id: str,
        *,
        working: bool = False,
    ) -> dict[str, Any]:
        view = self._base_view(snapshot, session_id, role, user_id)
        values = snapshot.values or {}
        view["summary"] = values.get("summary")
        archived = int(values.get("archived_count", 0))
        view["view"] = "working" if working else "transcript"
        if archived and not working:
            view["messages"] = [*await self.archive.read(thread_id, archived), *view["messages"]]
        return view

    async def history(self, thread_id: str, limit: int, before: str | None) -> dict[str, Any]:
        await self.require_thread(thread_id)
        items: list[dict[str, Any]] = []
        before_config = _config(thread_id, before) if before else None
        async for snap in self.graph.aget_state_history(
            _config(thread_id), limit=limit + 1, before=before_config
        ):
            messages = (snap.values or {}).get("messages", [])
            last = messages[-1] if messages else None
            items.append(
                {
                    "checkpoint_id": _checkpoint_id(snap.config),
                    "parent_checkpoint_id": _checkpoint_id(snap.parent_config),
                    "step": (snap.metadata or {}).get("step"),
                    "source": (snap.metadata or {}).get("source"),
                    "created_at": snap.created_at,
                    "next": list(snap.next),
                    "message_count": len(messages),
                    "last_message": (
                        {
                            "id": last.id,
                            "role": message_view(last)["role"],
                            "content": shorten(text_of(last), 200),
                        }
                        if last is not None
                        else None
                    ),
                }
            )
        next_cursor = items[limit - 1]["checkpoint_id"] if len(items) > limit else None
        return {"items": items[:limit], "next_cursor": next_cursor}

    async def _history(self, thread_id: str) -> AsyncIterator[StateSnapshot]:
        """The thread's checkpoints, newest first, a page at a time. Upstream's history
        reads every checkpoint with its whole state in one query: finding the last message
        of a 200-turn thread read all 1,000 states (1.4 s; 11 s at 320 turns on a busy
        machine, where the fuzzer found it), though it stops a few checkpoints back."""
        before: RunnableConfig | None = None
        while True:
            page = [
                snap
                async for snap in self.graph.aget_state_history(
                    _config(thread_id), before=before, limit=HISTORY_PAGE
                )
            ]
            for snap in page:
                yield snap
            if len(page) < HISTORY_PAGE:
                return
            before = page[-1].config

    async def _checkpoint_before_message(self, thread_id: str, message_id: str) -> str | None:
        """The newest checkpoint on the thread's current branch whose messages do not yet hold
        `message_id`; None when the message is only on an older branch (a rewind already took
        it away: a retried or late copy of that rewind must not rewind again and take the
        turns after it)."""
        on_branch: str | None = None  # the next checkpoint of the current branch, newest first
        seen_on_branch = seen_elsewhere = False
        async for snap in self._history(thread_id):
            cid = _checkpoint_id(snap.config)
            if on_branch is None and not seen_on_branch:
                on_branch = cid  # the newest checkpoint is the head
            ids = {m.id for m in (snap.values or {}).get("messages", [])}
            if cid != on_branch:
                seen_elsewhere = seen_elsewhere or message_id in ids
                continue
            if message_id in ids:
                seen_on_branch = True
            elif seen_on_branch:
                return cid
            on_branch = _checkpoint_id(snap.parent_config)
            if on_branch is None:
                break
        if seen_elsewhere:
            return None
        raise NotFound("no user message with that id in this thread", code="message_not_found")

    async def rewind(
        self,
        thread_id: str,
        session_id: str,
        role: str,
        user_id: str,
        *,
        checkpoint_id: str | None,
        message_id: str | None,
    ) -> dict[str, Any]:
        await self.require_thread(thread_id)
        async with self._holding(thread_id, "rewind"):
            if message_id is not None:
                checkpoint_id = await self._checkpoint_before_message(thread_id, message_id)
                if checkpoint_id is None:  # already rewound away: nothing to do
                    snapshot = await self.graph.aget_state(_config(thread_id))
                    return await self._view(snapshot, thread_id, session_id, role, user_id)
            target = await self.graph.aget_state(_config(thread_id, checkpoint_id))
            if _checkpoint_id(target.config) != checkpoint_id or target.created_at is None:
                raise NotFound("checkpoint not found", code="checkpoint_not_found")
            # A fork: the copy becomes the head and the later checkpoints stay in history.
            head = await self.graph.aupdate_state(target.config, None, as_node="__copy__")
            if target.next and not target.interrupts:
                # Drop the target's unfinished steps so the next message starts a clean turn.
                await self.graph.aupdate_state(head, None, as_node="__end__")
            snapshot = await self.graph.aget_state(_config(thread_id))
            values = snapshot.values or {}
            count = int(values.get("archived_count", 0)) + len(values.get("messages", []))
            await self.repo.set_message_count(thread_id, count)
            # The same view GET /state gives: the whole transcript, not just the working list.
            return await self._view(snapshot, thread_id, session_id, role, user_id)

    async def delete(self, thread_id: str) -> None:
        await self.require_thread(thread_id)
        # The lease row stays: its generation must never start again at 1 for this thread.
        async with self._holding(thread_id, "delete"):
            if self.keep is not None:  # nothing is left to compute it from afterwards
                async with self.repo.pool.connection() as conn, conn.transaction():
                    await self.keep(conn, [thread_id])
            checkpointer = self.graph.checkpointer
            if checkpointer is not None and not isinstance(checkpointer, bool):
                await checkpointer.adelete_thread(thread_id)
            await self.repo.delete_thread(thread_id)


def channel_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """Where the conversation happens when not on our page: Chatwoot or email
    (docs/channels.md), with the Chatwoot conversation's link."""
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict) or not metadata.get("channel"):
        return None
    return {"name": metadata["channel"], "link": metadata.get("channel_link")}
