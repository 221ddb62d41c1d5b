"""Runs: one turn (or one resume) of a thread, from lock to `done`.

A run executes in a background task that feeds an event queue. The HTTP response only
reads the queue, so a client that goes away never cancels a run half-way: the run finishes,
its writes are recorded, the lock is released, and `GET /state` shows the outcome.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import openai
import structlog
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from app.agent.context import AgentContext
from app.agent.graph import Graph, run_config, stream_turn
from app.api.auth import Principal
from app.config import Settings
from app.db.checkpointer import run_batching
from app.errors import Conflict, ThreadBusy
from app.metrics import Metrics
from app.runs.events import Event, TurnRecorder
from app.runs.locks import ThreadLocks
from app.runs.repository import RunRepository
from app.runs.views import message_view, title_from

log = structlog.get_logger(__name__)

MODEL_UNAVAILABLE = "The assistant's language model is unavailable right now; please retry shortly."
INTERNAL = "Something went wrong while answering; the conversation is safe, please retry."

# Waits before each retry of recording a run's outcome: a blip of the database is outlived,
# a longer outage only delays `done` by about a second before it is given up.
CLOSE_RUN_RETRY_WAITS_S = (0.2, 1.0)


@dataclass
class Run:
    run_id: str
    thread_id: str
    session_id: str
    start_checkpoint_id: str | None = None  # the checkpoint the run started from
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
    result: dict[str, Any] | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    async def batches(self) -> AsyncIterator[list[Event]]:
        """The next event and every event queued behind it, until the run's end marker."""
        while True:
            batch: list[Event] = []
            item = await self.queue.get()
            while item is not None:
                batch.append(item)
                if self.queue.empty():
                    break
                item = self.queue.get_nowait()
            if batch:
                yield batch
            if item is None:
                return


class RunService:
    def __init__(
        self,
        graph: Graph,
        settings: Settings,
        locks: ThreadLocks,
        repo: RunRepository,
        metrics: Metrics,
    ) -> None:
        self.metrics = metrics
        self.graph = graph
        self.settings = settings
        self.locks = locks
        self.repo = repo
        self._tasks: set[asyncio.Task[None]] = set()

    def config(self, thread_id: str) -> RunnableConfig:
        return run_config(thread_id, self.settings)

    async def post_message(
        self,
        principal: Principal,
        thread_id: str,
        session_id: str,
        content: str,
        client_message_id: str | None,
    ) -> Run | dict[str, Any]:
        """Start a turn. Returns the live run, or the recorded result of a retried message."""
        if not await self.locks.try_acquire(thread_id):
            # A retried message whose run is still going lands here too: busy either way.
            raise ThreadBusy()
        run = Run(run_id=str(uuid.uuid4()), thread_id=thread_id, session_id=session_id)
        try:
            started, run.start_checkpoint_id = await self.repo.open_run(
                run.run_id, thread_id, principal.user_id, session_id, client_message_id
            )
            if not started:  # this client_message_id already has a run
                earlier = await self.repo.run_for_client_message(thread_id, client_message_id or "")
                if earlier is not None and earlier["status"] == "running":
                    # Still "running", yet its thread's lock was free: no live run holds it, so
                    # the process died mid-turn and the retry runs the turn (app/db/checkpointer.py
                    # says what such a turn left stored).
                    log.warning("retrying an abandoned run", run_id=earlier["run_id"])
                    run.start_checkpoint_id = await self.repo.retry_abandoned(
                        run.run_id, thread_id, client_message_id or ""
                    )
                else:  # replay its result
                    await self.locks.release(thread_id)
                    return self._earlier_result(earlier)
        except BaseException:
            await self.locks.release(thread_id)
            raise
        human = HumanMessage(content=content, id=str(uuid.uuid4()))
        self._launch(run, principal, {"incoming": human}, title=title_from(content))
        return run

    async def resume(
        self, principal: Principal, thread_id: str, session_id: str, decision: str
    ) -> Run:
        if not await self.locks.try_acquire(thread_id):
            raise ThreadBusy()
        try:
            snapshot = await self.graph.aget_state(self.config(thread_id))
            if not snapshot.interrupts:
                raise Conflict(
                    "there is no change waiting for confirmation", code="nothing_pending"
                )
            run = Run(run_id=str(uuid.uuid4()), thread_id=thread_id, session_id=session_id)
            _, run.start_checkpoint_id = await self.repo.open_run(
                run.run_id, thread_id, principal.user_id, session_id, None
            )
        except BaseException:
            await self.locks.release(thread_id)
            raise
        self._launch(run, principal, Command(resume={"decision": decision}), title=None)
        return run

    def _earlier_result(self, earlier: dict[str, Any] | None) -> dict[str, Any]:
        if earlier is None or earlier["result"] is None:  # (a running run has none yet)
            raise ThreadBusy()
        result: dict[str, Any] = earlier["result"]
        return result

    def _launch(
        self, run: Run, principal: Principal, graph_input: Any, *, title: str | None
    ) -> None:
        task = asyncio.create_task(self._execute(run, principal, graph_input, title))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(
        self, run: Run, principal: Principal, graph_input: Any, title: str | None
    ) -> None:
        config = self.config(run.thread_id)
        context = AgentContext(
            user_id=principal.user_id, role=principal.role, thread_id=run.thread_id
        )
        recorder = TurnRecorder(text_protocol=self.settings.tool_calling == "react")
        status = "failed"
        started = time.monotonic()
        checkpoint_id: str | None = None
        bound = log.bind(run_id=run.run_id, thread_id=run.thread_id)
        try:
            await run.queue.put(
                (
                    "run",
                    {
                        "run_id": run.run_id,
                        "thread_id": run.session_id,
                        "checkpoint_id": run.start_checkpoint_id,
                    },
                )
            )
            # the run's checkpoints are held back and stored together (app/db/checkpointer.py)
            async with run_batching(self.graph.checkpointer):
                async for mode, chunk in stream_turn(self.graph, graph_input, config, context):
                    for event in recorder.on_chunk(mode, chunk):
                        await run.queue.put(event)
            status = "interrupted" if recorder.pending is not None else "completed"
            if recorder.citations and status == "completed":
                await run.queue.put(("citations", {"citations": recorder.citations}))
        except (openai.APIError, openai.APITimeoutError) as error:
            bound.warning("model call failed", error_type=type(error).__name__)
            await run.queue.put(
                ("error", {"code": "model_unavailable", "message": MODEL_UNAVAILABLE})
            )
        except asyncio.CancelledError:
            bound.warning("run cancelled")
            await run.queue.put(
                ("error", {"code": "cancelled", "message": "the reply was cancelled"})
            )
            raise
        except Exception:
            bound.exception("run failed")
            await run.queue.put(("error", {"code": "internal_error", "message": INTERNAL}))
        finally:
            result = self._result(recorder, status)
            try:
                closing = self._close_run(run, status, result, title, len(recorder.added))
                checkpoint_id = await asyncio.shield(closing)
                result["checkpoint_id"] = checkpoint_id
            except Exception:
                bound.exception("could not record run outcome")
            run.result = result
            self._count(recorder, status, time.monotonic() - started)
            # Release before `done`, so a client may post its next message as soon as it sees it.
            await asyncio.shield(self.locks.release(run.thread_id))
            await run.queue.put(
                (
                    "done",
                    {"status": status, "checkpoint_id": checkpoint_id, "usage": recorder.usage},
                )
            )
            await run.queue.put(None)
            run.finished.set()

    async def _close_run(
        self, run: Run, status: str, result: dict[str, Any], title: str | None, added: int
    ) -> str | None:
        """Record the outcome, the checkpoint the run ended on (a failed run's too: its
        finished steps are saved) and the thread's activity, in one round trip; after a
        failure, again. A run left 'running' once its lock is free reads as abandoned, and a
        retry of its client_message_id would run the turn a second time."""
        close = partial(
            self.repo.close_run, run.run_id, run.thread_id, status, result, title=title, added=added
        )
        for wait_s in CLOSE_RUN_RETRY_WAITS_S:
            try:
                return await close()
            except Exception as error:
                log.warning(
                    "could not record run outcome; trying again",
                    run_id=run.run_id,
                    error_type=type(error).__name__,
                )
            await asyncio.sleep(wait_s)
        return await close()

    def _count(self, recorder: TurnRecorder, status: str, seconds: float) -> None:
        m = self.metrics
        m.add("cs_agent_runs_total", status=status)
        m.add("cs_agent_run_seconds_total", seconds)
        m.add("cs_agent_model_tokens_total", recorder.input_tokens, direction="input")
        m.add("cs_agent_model_tokens_total", recorder.output_tokens, direction="output")
        m.add("cs_agent_tool_cache_total", recorder.cache_hits, result="hit")
        m.add("cs_agent_tool_cache_total", recorder.cache_misses, result="miss")
        m.add("cs_agent_tool_results_total", recorder.tool_oks, status="ok")
        m.add("cs_agent_tool_results_total", recorder.tool_errors, status="error")

    @staticmethod
    def _result(recorder: TurnRecorder, status: str) -> dict[str, Any]:
        result: dict[str, Any] = {
            "messages": [message_view(m) for m in recorder.added.values()],
            "checkpoint_id": None,  # filled in by `close_run`
            "status": status,
            "usage": recorder.usage,
        }
        if recorder.pending is not None:
            result["pending"] = recorder.pending
        if recorder.citations and status == "completed":
            result["citations"] = recorder.citations
        return result

    async def wait_idle(self, grace_s: float) -> None:
        """Let running turns finish on shutdown; cancel what is left after `grace_s`."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
