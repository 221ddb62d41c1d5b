"""A customer's message to a thread a person holds (queued or human): stored in the
conversation and on the thread's stream, with no run and no model call. It is recorded as a
run (status `handed_off`) so its client_message_id stays idempotent across retries."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from psycopg.types.json import Jsonb

from app.agent.graph import Graph, run_config
from app.agent.views import message_view, title_from
from app.config import Settings
from app.db.checkpointer import prefetched
from app.runs.leases import ThreadLeases
from app.runs.repository import RunRepository
from app.runs.run import Run
from app.runs.surgery import store_messages
from app.turn import Turn


class HeldThreads:
    def __init__(
        self, graph: Graph, settings: Settings, repo: RunRepository, leases: ThreadLeases
    ) -> None:
        self.graph = graph
        self.settings = settings
        self.repo = repo
        self.leases = leases

    async def store_customer_message(
        self, run: Run, human: HumanMessage, control: str
    ) -> dict[str, Any]:
        turn = Turn(lease=run.lease)  # fenced like a run's commits
        with turn.current(), prefetched(run.thread_id, run.checkpoint_row, turn):
            await store_messages(self.graph, run_config(run.thread_id, self.settings), [human])
        view = message_view(human)
        result: dict[str, Any] = {
            "run_id": run.run_id,
            "status": "handed_off",
            "messages": [view],
            "checkpoint_id": None,
            "usage": {},
            "control": {"state": control},
        }
        result["checkpoint_id"] = await self.repo.close_run(
            run.run_id,
            run.thread_id,
            "handed_off",
            result,
            title=title_from(str(human.content)),
            added=1,
            lease=run.lease,
        )
        if run.lease is not None:
            self.leases.forget(run.lease)
        event = {"id": human.id, "author": "customer", "name": None, "content": view["content"]}
        async with self.repo.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO thread_events (thread_id, kind, data) VALUES (%s, 'message', %s)",
                (run.thread_id, Jsonb(event)),
            )
        return result
