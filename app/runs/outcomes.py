"""Recording how a run ended: one statement stores the outcome, the thread's activity, the
rest of the event log and the day's tokens, and releases the lease; a blip is retried, an
outage is outlived in the background, so a run is never left 'running' for good."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

import structlog

from app import tracing
from app.actions.calls import HANDOFF_REASON, OUTCOME_UNKNOWN
from app.agent.views import message_view
from app.background import TaskSet
from app.config import Settings
from app.db.checkpointer import HeldRows
from app.metrics import Metrics
from app.runs.events import TurnRecorder
from app.runs.logs import records
from app.runs.repository import RunRepository
from app.runs.run import Run
from app.runs.stream import Sequenced, ToolResult

log = structlog.get_logger(__name__)

# Waits before each retry of recording a run's outcome: a blip of the database is outlived,
# a longer outage only delays `done` by about a second before it is given up.
CLOSE_RUN_RETRY_WAITS_S = (0.2, 1.0)
# After those tries, a run's outcome is recorded in the background, every few seconds for
# this long, so an outage never leaves a run 'running' for good.
RECORD_LATER_FOR_S = 600.0
RECORD_LATER_EVERY_S = 2.0


HANDOFF_TOOL = "transfer_to_human_agents"


def handoff_of(log: list[Sequenced]) -> dict[str, Any] | None:
    """The handoff the run made, if one went through (its call may be in the run before,
    which asked for the confirmation): the thread then waits for a person, with the
    summary its ticket was written with."""
    for _, event in log:
        if isinstance(event, ToolResult) and event.name == HANDOFF_TOOL and event.status == "ok":
            return {"reason": "handed off by the agent"}
        if isinstance(event, ToolResult) and event.content == OUTCOME_UNKNOWN:
            return {"reason": HANDOFF_REASON}  # a remote write's ticket says which, and why
    return None


def result_of(recorder: TurnRecorder, run_id: str, status: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "run_id": run_id,
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


class Outcomes:
    def __init__(self, repo: RunRepository, settings: Settings, metrics: Metrics) -> None:
        self.repo = repo
        self.settings = settings
        self.metrics = metrics
        self._tasks = TaskSet()

    async def close(
        self,
        run: Run,
        status: str,
        result: dict[str, Any],
        *,
        title: str | None,
        added: int,
        first_token_s: float | None = None,
    ) -> tuple[bool, str | None]:
        """Record the outcome, the checkpoint the run ended on (a failed run's too: its
        finished steps are saved), the thread's activity and the log not shipped yet, and
        release the lease: one round trip; after a failure, again. Returns whether it was
        recorded (if not, it is recorded later, and the lease is still held) and that
        checkpoint. A run left 'running' once its lease is free reads as
        abandoned, and a retry of its client_message_id would run the turn a second time."""
        close = self._closing(run, status, result, title, added, first_token_s, None)
        try:
            checkpoint_id = await asyncio.shield(self._with_retries(run, close))
            self._handed_off(run)
            return True, checkpoint_id
        except Exception as error:
            log.warning(
                "could not record run outcome; recording it later",
                run_id=run.run_id,
                error_type=type(error).__name__,
            )
            self._spawn(self._record_later(run, close))
            return False, None

    async def close_with_steps(
        self,
        run: Run,
        status: str,
        result: dict[str, Any],
        held: HeldRows,
        *,
        title: str | None,
        added: int,
        first_token_s: float | None = None,
    ) -> str | None:
        """`close`, with the steps the run `held` back in the same fenced transaction: one
        commit for both. One try: on a failure the rows are held again and the error is
        raised, for the caller to store them on their own (a lost lease or an outage then
        fails the run, as it would have) and `close` after. A connection cut after the
        COMMIT reached the server is the exception: then both committed, the second store
        finds the lease released and the run ends failed for its client, while the outcome
        recorded first stands (CLOSE_RUN records a run's outcome once)."""
        close = self._closing(run, status, result, title, added, first_token_s, held)
        checkpoint_id: str | None = await asyncio.shield(close())
        self._handed_off(run)
        return checkpoint_id

    def _closing(
        self,
        run: Run,
        status: str,
        result: dict[str, Any],
        title: str | None,
        added: int,
        first_token_s: float | None,
        held: HeldRows | None,
    ) -> partial[Any]:
        return partial(
            self.repo.close_run,
            run.run_id,
            run.thread_id,
            status,
            result,
            title=title,
            added=added,
            events=records(run.unshipped()),
            lease=run.lease,
            user_id=run.user_id or None,
            handoff=handoff_of(run.log),
            ttft_ms=None if first_token_s is None else round(first_token_s * 1000),
            held=held,
        )

    def _handed_off(self, run: Run) -> None:
        handoff = handoff_of(run.log)
        if handoff is not None:  # the thread waits for a person now
            self.metrics.handed_off(handoff["reason"])

    async def _with_retries(self, run: Run, close: partial[Any]) -> str | None:
        for wait_s in CLOSE_RUN_RETRY_WAITS_S:
            try:
                checkpoint_id: str | None = await close()
                return checkpoint_id
            except Exception as error:
                log.warning(
                    "could not record run outcome; trying again",
                    run_id=run.run_id,
                    error_type=type(error).__name__,
                )
            await asyncio.sleep(wait_s)
        checkpoint_id = await close()
        return checkpoint_id

    async def _record_later(self, run: Run, close: partial[Any]) -> None:
        """The outcome of a run that ended during an outage, once the database is back."""
        deadline = time.monotonic() + RECORD_LATER_FOR_S
        while time.monotonic() < deadline:
            await asyncio.sleep(RECORD_LATER_EVERY_S)
            try:
                await close()
            except Exception:
                continue
            log.info("recorded a run's outcome after an outage", run_id=run.run_id)
            return
        log.error("gave up recording a run's outcome", run_id=run.run_id)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(coroutine, "run outcome")

    def count(
        self, recorder: TurnRecorder, status: str, seconds: float, first_token_s: float | None
    ) -> None:
        self.metrics.run_ended(
            status,
            seconds,
            first_token_s=first_token_s,
            model="demo" if self.settings.uses_demo_model else self.settings.llm_model,
            input_tokens=recorder.input_tokens,
            output_tokens=recorder.output_tokens,
            cache_hits=recorder.cache_hits,
            cache_misses=recorder.cache_misses,
            tool_oks=recorder.tool_oks,
            tool_errors=recorder.tool_errors,
        )
        tracing.run_outcome(status, recorder.input_tokens, recorder.output_tokens)
