"""Executing a run: the graph in a background task, its deadline, cancels, a lost lease, and
every way it can fail mapped to one `error` event; then its outcome, the lease's release and
`done`, whatever happened."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import openai
import psycopg
import structlog

from app import tracing
from app.agent.graph import Graph, run_config, stream_turn
from app.agent.ports import WriteLedger
from app.config import Settings
from app.db.checkpointer import HeldRows, prefetched, run_batching
from app.fencing import LeaseLost
from app.identity import AgentContext, Principal
from app.metrics import Metrics
from app.policies.texts import PolicyTexts
from app.runs.events import TurnRecorder
from app.runs.leases import ThreadLeases
from app.runs.logs import LogShipper
from app.runs.outcomes import Outcomes, result_of
from app.runs.repository import RunRepository
from app.runs.run import Run
from app.runs.stream import Citations, Done, RunFailed, RunStarted, Token
from app.runs.surgery import leave_consistent
from app.turn import Turn, current_turn

log = structlog.get_logger(__name__)

MODEL_UNAVAILABLE = "The assistant's language model is unavailable right now; please retry shortly."
INTERNAL = "Something went wrong while answering; the conversation is safe, please retry."
SUPERSEDED = "Another reply took over this conversation; this one stopped before saving anything."
DEADLINE = "The reply took too long and was stopped; the conversation is safe, please retry."
DATABASE_DOWN = "The service's database is unavailable right now; please retry shortly."
CANCEL_GRACE_S = 3.0


def _stop_if_running(run: Run) -> None:
    if run.task is not None and run.in_graph:
        run.task.cancel()


@dataclass
class StreamedAnswer:
    """The answer the agent streams, handed to the run piece by piece as the model sends
    it (the turn's sink, `Turn.tokens`), and kept until the agent's step stores it whole: a
    cancel stores what there is so far, cut."""

    run: Run
    started: float  # the run's start (monotonic), for its time to first token
    parts: list[str] = field(default_factory=list)
    message_id: str | None = None
    first_token_s: float | None = None

    def __call__(self, text: str, message_id: str) -> None:
        self.parts.append(text)
        self.message_id = message_id
        if self.first_token_s is None:
            self.first_token_s = time.monotonic() - self.started
        self.run.emit(Token(text=text, message_id=message_id))

    def stored(self) -> None:
        self.parts.clear()
        self.message_id = None


class Executor:
    def __init__(
        self,
        graph: Graph,
        settings: Settings,
        leases: ThreadLeases,
        repo: RunRepository,
        metrics: Metrics,
        *,
        ledger: WriteLedger | None,
        write_names: frozenset[str],
        policies: PolicyTexts | None = None,
    ) -> None:
        self.graph = graph
        self.policies = policies  # each policy version's rules, read once per process
        self.settings = settings
        self.leases = leases
        self.repo = repo
        self.metrics = metrics
        self.outcomes = Outcomes(repo, settings, metrics)
        self.ledger = ledger  # to close a cancelled run's tool calls with their outcomes
        self.write_names = write_names
        self.live: dict[str, Run] = {}  # this process's runs, until `done`
        self._tasks: set[asyncio.Task[None]] = set()

    def launch(self, run: Run, principal: Principal, inputs: list[Any], title: str | None) -> None:
        run.user_id = principal.user_id
        run.shipper = LogShipper(self.repo, run.run_id, run.take)
        execute = self._execute(run, principal, inputs, title)
        task = asyncio.create_task(tracing.in_run(execute, run.run_id, run.thread_id))
        run.task = task
        self.live[run.run_id] = run
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if run.lease is not None:
            self.leases.on_lost(run.lease, partial(self._stop_superseded, run))

    # -- stopping a run ----------------------------------------------------------------------

    def cancel_here(self, run: Run) -> None:
        """The agent node stops at the next step boundary, or between two chunks of the
        model's stream, and ends the turn with the answer cut where it was; a write under
        way finishes first. A run that ended meanwhile is left alone."""
        if run.cancel_requested or run.task is None or run.ended:
            return
        run.cancel_requested = True
        run.control.stop_requested = True
        task = asyncio.create_task(self._stop_hard_later(run))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stop_hard_later(self, run: Run) -> None:
        """A model that sends nothing never reaches a chunk boundary: after CANCEL_GRACE_S
        the run is stopped outright (never inside a write) and its steps are closed."""
        await asyncio.sleep(CANCEL_GRACE_S)
        if run.ended:
            return
        stop = partial(_stop_if_running, run)
        if run.control.writing:
            run.control.on_idle = stop
        else:
            stop()

    @staticmethod
    def _stop_superseded(run: Run) -> None:
        """The heartbeat found the run's lease taken over: stop it now (its fenced commits
        would fail anyway)."""
        run.lease_lost = True
        _stop_if_running(run)

    # -- the run itself ----------------------------------------------------------------------

    async def _execute(
        self, run: Run, principal: Principal, inputs: list[Any], title: str | None
    ) -> None:
        started = time.monotonic()
        answer = StreamedAnswer(run, started)
        # The run's state, one object: its lease fences every commit, its control brings a
        # cancel to the agent node, its sink takes the answer's tokens, and the blocks below
        # put the held steps and the prefetched checkpoint on it. Current in the task's own
        # context, whose copy every task of the graph gets.
        turn = Turn(lease=run.lease, control=run.control, tokens=answer)
        current_turn.set(turn)
        config = run_config(run.thread_id, self.settings)
        context = AgentContext(
            user_id=principal.user_id,
            role=principal.role,
            thread_id=run.thread_id,
            policy_version=run.policy_version,
        )
        recorder = TurnRecorder()
        status = "failed"
        closed: tuple[dict[str, Any], str | None] | None = None  # recorded with its steps
        bound = log.bind(run_id=run.run_id, thread_id=run.thread_id)
        self.metrics.run_started()
        try:
            run.emit(
                RunStarted(
                    run_id=run.run_id,
                    thread_id=run.session_id,
                    checkpoint_id=run.start_checkpoint_id,
                )
            )
            if self.policies is not None and run.policy_version is not None:
                rules = await self.policies.rules(run.policy_version)
                context = replace(context, rules=rules)
            run.in_graph = True
            # the run's checkpoints are held back and stored together (checkpointer.py),
            # and the checkpoint it starts from is the one its claim read
            async with run_batching(self.graph.checkpointer, turn) as held:
                async with asyncio.timeout(self.settings.turn_deadline_s):
                    with prefetched(run.thread_id, run.checkpoint_row, turn):
                        for graph_input in inputs:
                            stream = stream_turn(self.graph, graph_input, config, context, turn)
                            async for mode, chunk in stream:
                                if mode == "updates" and "agent" in chunk:
                                    answer.stored()
                                for event in recorder.on_chunk(mode, chunk):
                                    run.emit(event)
                ended = "interrupted" if recorder.pending is not None else "completed"
                if run.cancel_requested:  # the agent ended the turn where the cancel found it
                    ended = "cancelled"
                if recorder.citations and ended == "completed":
                    run.emit(Citations(citations=recorder.citations))
                if held is not None:
                    closed = await self._close_with_steps(run, recorder, ended, title, held, answer)
            # Only now: if the steps could not be stored with the outcome, the block's end
            # stored them, and a failure there leaves the run failed, never 'completed'
            # with its steps lost.
            status = ended
        except LeaseLost:
            run.lease_lost = True
            bound.error("thread lease lost; the run stopped before committing")
            run.emit(RunFailed(code="thread_superseded", message=SUPERSEDED))
        except TimeoutError:
            bound.warning("turn deadline passed", deadline_s=self.settings.turn_deadline_s)
            run.emit(RunFailed(code="deadline_exceeded", message=DEADLINE))
        except (openai.APIError, openai.APITimeoutError) as error:
            bound.warning("model call failed", error_type=type(error).__name__)
            run.emit(RunFailed(code="model_unavailable", message=MODEL_UNAVAILABLE))
        except asyncio.CancelledError:
            if not (run.lease_lost or run.cancel_requested):  # the process is shutting down
                bound.warning("run cancelled")
                run.emit(RunFailed(code="cancelled", message="the reply was cancelled"))
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if run.lease_lost:  # stopped by the heartbeat: its lease is another run's now
                bound.error("thread lease lost; the run stopped before committing")
                run.emit(RunFailed(code="thread_superseded", message=SUPERSEDED))
            else:
                bound.info("run cancelled by the customer")
                status = "cancelled"
                await leave_consistent(
                    self.graph,
                    config,
                    thread_id=run.thread_id,
                    partial="".join(answer.parts),
                    partial_id=answer.message_id,
                    ledger=self.ledger,
                    write_names=self.write_names,
                )
        except psycopg.OperationalError as error:  # a pool timeout too
            bound.warning("database unavailable during a run", error_type=type(error).__name__)
            run.emit(RunFailed(code="database_unavailable", message=DATABASE_DOWN))
        except Exception:
            bound.exception("run failed")
            run.emit(RunFailed(code="internal_error", message=INTERNAL))
        finally:
            first_token_s = answer.first_token_s
            await self._finish(run, recorder, status, title, started, first_token_s, closed)

    async def _close_with_steps(
        self,
        run: Run,
        recorder: TurnRecorder,
        status: str,
        title: str | None,
        held: HeldRows,
        answer: StreamedAnswer,
    ) -> tuple[dict[str, Any], str | None] | None:
        """A run that ended well stores its last steps in the transaction that records its
        outcome and releases its lease: one commit, not two. From here on neither a cancel
        nor the heartbeat stops the run (the fence decides). If that transaction fails,
        nothing of it committed: the steps are stored on their own as the block ends (a
        lost lease or an outage then fails the run, as before) and `_finish` closes it."""
        if run.lease_lost or not held.batches:
            return None
        run.in_graph = False
        if run.shipper is not None:
            await run.shipper.stop()  # what it did not ship goes with the outcome
        result = result_of(recorder, run.run_id, status)
        try:
            checkpoint_id = await self.outcomes.close_with_steps(
                run,
                status,
                result,
                held,
                title=title,
                added=len(recorder.added),
                first_token_s=answer.first_token_s,
            )
        except Exception as error:
            log.info(
                "storing a run's last steps on their own",
                run_id=run.run_id,
                error_type=type(error).__name__,
            )
            return None
        return result, checkpoint_id

    async def _finish(
        self,
        run: Run,
        recorder: TurnRecorder,
        status: str,
        title: str | None,
        started: float,
        first_token_s: float | None,
        closed: tuple[dict[str, Any], str | None] | None,
    ) -> None:
        run.in_graph = False
        if closed is not None:
            (result, checkpoint_id), recorded = closed, True
        else:
            if run.shipper is not None:
                await run.shipper.stop()  # what it did not ship goes with the outcome
            result = result_of(recorder, run.run_id, status)
            added = 0 if run.lease_lost else len(recorder.added)
            # One statement records the outcome and releases the lease, before `done`, so a
            # client may post its next message as soon as it sees it.
            recorded, checkpoint_id = await self.outcomes.close(
                run, status, result, title=title, added=added, first_token_s=first_token_s
            )
        if run.lease is not None:
            if recorded:
                self.leases.forget(run.lease)
            else:  # the lease is still held: free it if the database lets us
                await asyncio.shield(self.leases.release(run.lease))
        result["checkpoint_id"] = checkpoint_id
        run.result = result
        self.outcomes.count(recorder, status, time.monotonic() - started, first_token_s)
        run.emit(Done(status=status, checkpoint_id=checkpoint_id, usage=recorder.usage))
        run.finished.set()
        self.live.pop(run.run_id, None)

    async def wait_idle(self, grace_s: float) -> None:
        """Let running turns finish on shutdown; cancel what is left after `grace_s`."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
