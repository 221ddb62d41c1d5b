"""Runs: one turn (or one resume) of a thread, from lock to `done`.

A run executes in a background task that appends to its event log (`Run.log`). The HTTP
response is one reader of it, so a client that goes away never cancels a run half-way: the
run finishes, its writes are recorded, the lease is released, and `GET /state` shows the
outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import openai
import psycopg
import structlog
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from app import tracing
from app.agent.graph import Graph, run_config, stream_turn
from app.agent.ports import WriteLedger
from app.agent.repair import close_dangling
from app.agent.state import fresh_turn_fields
from app.config import Settings
from app.db.checkpointer import run_batching
from app.errors import Conflict, NotFound, ThreadBusy
from app.fencing import Lease, LeaseLost, RunControl, current_control, current_lease
from app.identity import AgentContext, Principal
from app.metrics import Metrics
from app.runs.events import TurnRecorder
from app.runs.leases import Claim, ThreadLeases
from app.runs.logs import LogShipper, records
from app.runs.repository import RunRepository
from app.runs.stream import (
    Citations,
    Done,
    RunFailed,
    RunStarted,
    Sequenced,
    StreamEvent,
    Token,
)
from app.runs.views import message_view, title_from

log = structlog.get_logger(__name__)

MODEL_UNAVAILABLE = "The assistant's language model is unavailable right now; please retry shortly."
INTERNAL = "Something went wrong while answering; the conversation is safe, please retry."
SUPERSEDED = "Another reply took over this conversation; this one stopped before saving anything."
DEADLINE = "The reply took too long and was stopped; the conversation is safe, please retry."
DATABASE_DOWN = "The service's database is unavailable right now; please retry shortly."
# After the tries of CLOSE_RUN_RETRY_WAITS_S, a run's outcome is recorded in the background,
# every few seconds for this long, so an outage never leaves a run 'running' for good.
RECORD_LATER_FOR_S = 600.0
RECORD_LATER_EVERY_S = 2.0
# How often a process looks for cancels and follow requests sent to other replicas for its
# runs (one indexed query, only while it has runs), and prunes old event logs.
REQUEST_POLL_S = 0.25
PRUNE_EVERY_S = 60.0
CANCEL_GRACE_S = 3.0
# A retry of a client message whose run ended in one of these runs the turn (again); a
# completed or interrupted one is replayed.
RETRYABLE = ("running", "abandoned", "failed")
# The id of the human message a client_message_id opens a turn with, the same on every
# retry: the turn's idempotency keys (app/db/idempotency.py) follow from it, so a write
# a retried turn repeats is replayed from its record instead of running twice.
MESSAGE_ID_NAMESPACE = uuid.UUID("6f0b7a44-5d2e-4c55-9d0e-7f3c1c1d2a90")


def human_message_id(thread_id: str, client_message_id: str | None) -> str:
    if client_message_id is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(MESSAGE_ID_NAMESPACE, f"{thread_id}\n{client_message_id}"))


# Waits before each retry of recording a run's outcome: a blip of the database is outlived,
# a longer outage only delays `done` by about a second before it is given up.
CLOSE_RUN_RETRY_WAITS_S = (0.2, 1.0)


@dataclass
class Run:
    run_id: str
    thread_id: str
    session_id: str
    lease: Lease | None = None
    start_checkpoint_id: str | None = None  # the checkpoint the run started from
    log: list[Sequenced] = field(default_factory=list)  # every event so far, ids 1, 2, ...
    result: dict[str, Any] | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    lease_lost: bool = False
    cancel_requested: bool = False
    task: asyncio.Task[None] | None = None
    in_graph: bool = False  # while the graph runs, a lost lease or a cancel stops it
    control: RunControl = field(default_factory=RunControl)
    shipper: LogShipper | None = None  # set once someone may read the log from elsewhere
    _appended: asyncio.Event = field(default_factory=asyncio.Event)

    def emit(self, event: StreamEvent) -> None:
        self.log.append((len(self.log) + 1, event))
        # Wake every reader waiting now; later ones wait on a fresh event.
        woken, self._appended = self._appended, asyncio.Event()
        woken.set()

    @property
    def ended(self) -> bool:
        return bool(self.log) and isinstance(self.log[-1][1], Done)

    async def follow(self, after: int = 0) -> AsyncIterator[list[Sequenced]]:
        """The events after id `after`, as they come: each batch is everything appended
        since the last one, until `done`. Any number of readers may follow one run; one
        that leaves before the end gets the log shipped, so it can come back anywhere."""
        cursor = after
        try:
            while True:
                appended = self._appended
                if cursor < len(self.log):
                    batch = self.log[cursor:]
                    cursor = len(self.log)
                    yield batch
                    if isinstance(batch[-1][1], Done):
                        return
                    continue
                if self.ended:
                    return
                await appended.wait()
        finally:
            if not self.ended and self.shipper is not None:
                self.shipper.start()


def _stop_if_running(run: Run) -> None:
    if run.task is not None and run.in_graph:
        run.task.cancel()


class RunService:
    def __init__(
        self,
        graph: Graph,
        settings: Settings,
        leases: ThreadLeases,
        repo: RunRepository,
        metrics: Metrics,
        *,
        ledger: WriteLedger | None = None,
        write_names: frozenset[str] = frozenset(),
    ) -> None:
        self.metrics = metrics
        self.graph = graph
        self.settings = settings
        self.leases = leases
        self.repo = repo
        self.ledger = ledger  # to close a cancelled run's tool calls with their outcomes
        self.write_names = write_names
        self._tasks: set[asyncio.Task[None]] = set()
        self._live: dict[str, Run] = {}  # this process's runs, until `done`
        self._watcher: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._watcher = asyncio.create_task(self._watch_requests())

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher

    def live(self, run_id: str) -> Run | None:
        return self._live.get(run_id)

    async def _watch_requests(self) -> None:
        """Cancels and follow requests sent to other replicas for this process's runs
        (polled: nothing here depends on a session, so PgBouncer is fine), and the pruning
        of old event logs."""
        last_prune = 0.0
        while True:
            await asyncio.sleep(REQUEST_POLL_S)
            try:
                if self._live:
                    for row in await self.repo.requests_for(list(self._live)):
                        run = self._live.get(row["run_id"])
                        if run is None:
                            continue
                        if row["tail_requested"] and run.shipper is not None:
                            run.shipper.start()
                        if row["cancel_requested"]:
                            self._cancel_here(run)
                if time.monotonic() - last_prune > PRUNE_EVERY_S:
                    last_prune = time.monotonic()
                    await self.repo.prune_logs(self.settings.run_log_ttl_s)
            except Exception as error:  # the database is away: try again next time
                log.warning("could not poll run requests", error_type=type(error).__name__)

    async def cancel(self, thread_id: str, run_id: str) -> None:
        """Stop a run, wherever it runs: here at once, on another replica through its
        owner's poll. Conflict if it has ended; NotFound if there is no such run."""
        run = self._live.get(run_id)
        if run is not None and run.thread_id == thread_id and not run.ended:
            self._cancel_here(run)
            return
        if await self.repo.request(thread_id, run_id, "cancel"):
            return
        if await self.repo.run(thread_id, run_id) is None:
            raise NotFound("run not found", code="run_not_found")
        raise Conflict("the run has already ended", code="run_finished")

    def _cancel_here(self, run: Run) -> None:
        """The agent node stops at the next step boundary, or between two chunks of the
        model's stream, and ends the turn with the answer cut where it was; a write under
        way finishes first. A run that ended meanwhile is left alone."""
        if run.cancel_requested or run.task is None or run.ended:
            return
        run.cancel_requested = True
        run.control.stop_requested = True
        self._spawn(self._stop_hard_later(run))

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

    def config(self, thread_id: str) -> RunnableConfig:
        return run_config(thread_id, self.settings)

    async def _claim(self, thread_id: str, session_id: str) -> tuple[Run, Claim]:
        run = Run(run_id=str(uuid.uuid4()), thread_id=thread_id, session_id=session_id)
        claim = await self.leases.claim(thread_id, run.run_id)
        if claim is None:
            raise ThreadBusy()
        run.lease = claim.lease
        return run, claim

    async def post_message(
        self,
        principal: Principal,
        thread_id: str,
        session_id: str,
        content: str,
        client_message_id: str | None,
    ) -> Run | dict[str, Any]:
        """Start a turn. Returns the live run, or the recorded result of a retried message."""
        run, claim = await self._claim(thread_id, session_id)
        human = HumanMessage(content=content, id=human_message_id(thread_id, client_message_id))
        try:
            started, run.start_checkpoint_id = await self.repo.open_run(
                run.run_id,
                thread_id,
                principal.user_id,
                session_id,
                client_message_id,
                self.leases.owner,
            )
            retrying = False
            if not started:  # this client_message_id already has a run
                earlier = await self.repo.run_for_client_message(thread_id, client_message_id or "")
                if earlier is None or earlier["status"] not in RETRYABLE:
                    await self._release(run)
                    return self._earlier_result(earlier)
                # It failed, or its process died mid-turn (the claim closed it as
                # abandoned): this run takes its client_message_id and does the turn.
                log.warning("retrying a run", run_id=earlier["run_id"], status=earlier["status"])
                run.start_checkpoint_id = await self.repo.retry_run(
                    run.run_id, thread_id, client_message_id or "", self.leases.owner
                )
                retrying = True
            inputs: list[Any] = [{"incoming": human}]
            if retrying or claim.stale_run is not None:
                inputs = await self._recovery_inputs(thread_id, human)
        except BaseException:
            await self._release(run)
            raise
        self._launch(run, principal, inputs, title=title_from(content))
        return run

    async def _recovery_inputs(self, thread_id: str, human: HumanMessage) -> list[Any]:
        """What a run does on a thread a dead run left, before (or instead of) its message.

        A step the dead run had begun is finished first: the graph goes on from the stored
        checkpoint (input None), so an approved write that did not commit runs now, once
        (its idempotency key is the same), and one that did commit replays its record. If
        the message is the very one that dead run was answering (a retry with the same
        client_message_id), that finishes its turn, and it is not added a second time."""
        snapshot = await self.graph.aget_state(self.config(thread_id))
        values = snapshot.values or {}
        unfinished = bool(snapshot.next) and not snapshot.interrupts
        inputs: list[Any] = [None] if unfinished else []
        waiting = values.get("incoming")  # stored, its turn not opened yet (the model failed)
        if human.id not in (values.get("turn_id"), getattr(waiting, "id", None)):
            inputs.append({"incoming": human})
        if unfinished:
            log.warning("finishing a step a dead run left", thread_id=thread_id, next=snapshot.next)
        return inputs

    async def resume(
        self, principal: Principal, thread_id: str, session_id: str, decision: str
    ) -> Run:
        run, _ = await self._claim(thread_id, session_id)
        try:
            snapshot = await self.graph.aget_state(self.config(thread_id))
            if snapshot.interrupts:
                graph_input: Any = Command(resume={"decision": decision})
            elif snapshot.next:
                # The decision was taken, and its run died before the step it approved
                # finished: that step goes on now (see `_recovery_inputs`).
                log.warning("finishing a step a dead run left", thread_id=thread_id)
                graph_input = None
            else:
                raise Conflict(
                    "there is no change waiting for confirmation", code="nothing_pending"
                )
            _, run.start_checkpoint_id = await self.repo.open_run(
                run.run_id, thread_id, principal.user_id, session_id, None, self.leases.owner
            )
        except BaseException:
            await self._release(run)
            raise
        if isinstance(graph_input, Command):  # the customer's decision on a waiting write
            self.metrics.confirmation(decision)
        self._launch(run, principal, [graph_input], title=None)
        return run

    async def _release(self, run: Run) -> None:
        if run.lease is not None:
            await asyncio.shield(self.leases.release(run.lease))

    def _earlier_result(self, earlier: dict[str, Any] | None) -> dict[str, Any]:
        if earlier is None or earlier["result"] is None:  # (a running run has none yet)
            raise ThreadBusy()
        result: dict[str, Any] = {**earlier["result"], "run_id": earlier["run_id"]}
        return result

    def _launch(
        self, run: Run, principal: Principal, inputs: list[Any], *, title: str | None
    ) -> None:
        run.shipper = LogShipper(self.repo, run.run_id, lambda: run.log)
        execute = self._execute(run, principal, inputs, title)
        task = asyncio.create_task(tracing.in_run(execute, run.run_id, run.thread_id))
        run.task = task
        self._live[run.run_id] = run
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if run.lease is not None:
            self.leases.on_lost(run.lease, partial(self._stop_superseded, run))

    @staticmethod
    def _stop_superseded(run: Run) -> None:
        """The heartbeat found the run's lease taken over: stop it now (its fenced commits
        would fail anyway)."""
        run.lease_lost = True
        if run.task is not None and run.in_graph:
            run.task.cancel()

    async def _execute(
        self, run: Run, principal: Principal, inputs: list[Any], title: str | None
    ) -> None:
        current_lease.set(run.lease)  # the task's own context: every commit is fenced with it
        current_control.set(run.control)  # a cancel reaches the agent node through it
        config = self.config(run.thread_id)
        context = AgentContext(
            user_id=principal.user_id, role=principal.role, thread_id=run.thread_id
        )
        recorder = TurnRecorder()
        status = "failed"
        started = time.monotonic()
        checkpoint_id: str | None = None
        partial_answer: list[str] = []  # the answer being streamed, cut by a cancel
        first_token_s: float | None = None
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
            run.in_graph = True
            async with asyncio.timeout(self.settings.turn_deadline_s):
                # the run's checkpoints are held back and stored together (checkpointer.py)
                async with run_batching(self.graph.checkpointer):
                    for graph_input in inputs:
                        stream = stream_turn(self.graph, graph_input, config, context)
                        async for mode, chunk in stream:
                            if mode == "updates" and "agent" in chunk:
                                partial_answer.clear()
                            for event in recorder.on_chunk(mode, chunk):
                                if isinstance(event, Token):
                                    partial_answer.append(event.text)
                                    if first_token_s is None:
                                        first_token_s = time.monotonic() - started
                                run.emit(event)
            status = "interrupted" if recorder.pending is not None else "completed"
            if run.cancel_requested:  # the agent ended the turn where the cancel found it
                status = "cancelled"
            if recorder.citations and status == "completed":
                run.emit(Citations(citations=recorder.citations))
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
                await self._leave_consistent(run, config, "".join(partial_answer))
        except psycopg.OperationalError as error:  # a pool timeout too
            bound.warning("database unavailable during a run", error_type=type(error).__name__)
            run.emit(RunFailed(code="database_unavailable", message=DATABASE_DOWN))
        except Exception:
            bound.exception("run failed")
            run.emit(RunFailed(code="internal_error", message=INTERNAL))
        finally:
            run.in_graph = False
            result = {"run_id": run.run_id, **self._result(recorder, status)}
            added = 0 if run.lease_lost else len(recorder.added)
            try:
                closing = self._close_run(run, status, result, title, added, records(run.log))
                checkpoint_id = await asyncio.shield(closing)
                result["checkpoint_id"] = checkpoint_id
            except Exception as error:
                bound.warning(
                    "could not record run outcome; recording it later",
                    error_type=type(error).__name__,
                )
                self._spawn(self._record_later(run, status, dict(result), title, added))
            run.result = result
            self._count(recorder, status, time.monotonic() - started, first_token_s)
            # Release before `done`, so a client may post its next message as soon as it sees it.
            await self._release(run)
            run.emit(Done(status=status, checkpoint_id=checkpoint_id, usage=recorder.usage))
            run.finished.set()
            self._live.pop(run.run_id, None)
            if run.shipper is not None:
                await run.shipper.stop()  # the whole log is stored with the outcome

    async def _leave_consistent(self, run: Run, config: RunnableConfig, partial: str) -> None:
        """After a cancel: every tool call of the run gets its result (a write's recorded
        outcome, or "interrupted, not executed"), and the answer being written stays as
        far as it got, marked as cut; so the next turn starts clean."""
        try:
            snapshot = await self.graph.aget_state(config)
            values = snapshot.values or {}
            closed: list[Any] = []
            if self.ledger is not None:
                closed = await close_dangling(
                    values.get("messages") or [],
                    thread_id=run.thread_id,
                    turn_id=values.get("turn_id"),
                    write_names=self.write_names,
                    ledger=self.ledger,
                )
            cut = AIMessage(
                content=f"{partial} …" if partial else "",
                response_metadata={"finish_reason": "cancelled"},
            )
            update: dict[str, Any] = {"messages": [*closed, cut]}
            incoming = values.get("incoming")
            if incoming is not None:  # cancelled before its turn was opened: open it now
                turn = int(values.get("turn_number") or 0) + 1
                update = {
                    "messages": [*closed, incoming, cut],
                    "incoming": None,
                    **fresh_turn_fields(str(incoming.id), turn),
                }
            await self.graph.aupdate_state(config, update, as_node="agent")
        except Exception:
            log.exception("could not close a cancelled run's steps", run_id=run.run_id)

    async def _close_run(
        self,
        run: Run,
        status: str,
        result: dict[str, Any],
        title: str | None,
        added: int,
        events: list[Any],
    ) -> str | None:
        """Record the outcome, the checkpoint the run ended on (a failed run's too: its
        finished steps are saved) and the thread's activity, in one round trip; after a
        failure, again. A run left 'running' once its lock is free reads as abandoned, and a
        retry of its client_message_id would run the turn a second time."""
        close = partial(
            self.repo.close_run,
            run.run_id,
            run.thread_id,
            status,
            result,
            title=title,
            added=added,
            events=events,
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

    async def _record_later(
        self, run: Run, status: str, result: dict[str, Any], title: str | None, added: int
    ) -> None:
        """The outcome of a run that ended during an outage, once the database is back."""
        deadline = time.monotonic() + RECORD_LATER_FOR_S
        while time.monotonic() < deadline:
            await asyncio.sleep(RECORD_LATER_EVERY_S)
            try:
                await self.repo.close_run(
                    run.run_id, run.thread_id, status, result, title=title, added=added
                )
            except Exception:
                continue
            log.info("recorded a run's outcome after an outage", run_id=run.run_id)
            return
        log.error("gave up recording a run's outcome", run_id=run.run_id)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _count(
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
