"""Runs: starting a turn, resuming a paused one, cancelling one, from any replica.

A post opens its run with one statement (`RunRepository.begin_run`: the post rate and the
day's token budget, the thread's lease, the run's record and the checkpoint it starts
from); the executor runs it in the background (executor.py), and one statement records its
outcome and releases the lease (outcomes.py). Requests for runs of this process sent to
other replicas arrive through the poller (poller.py).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import structlog
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from app.agent.graph import Graph, run_config
from app.agent.ports import WriteLedger
from app.agent.views import title_from
from app.config import Settings
from app.db.checkpointer import prefetched
from app.errors import Conflict, NotFound, ThreadBusy
from app.fencing import Lease
from app.identity import Principal
from app.metrics import Metrics, lock_wait, timed
from app.policies.texts import PolicyTexts
from app.runs.admission import Admission
from app.runs.executor import Executor
from app.runs.held import HeldThreads
from app.runs.leases import ThreadLeases
from app.runs.limits import PostGate
from app.runs.poller import RunRequests
from app.runs.repository import RunRepository
from app.runs.run import Run, human_message_id
from app.runs.statements import Begun
from app.runs.surgery import recovery_inputs

__all__ = ["Run", "RunService", "human_message_id"]

log = structlog.get_logger(__name__)

# A retry of a client message whose run ended in one of these runs the turn (again); a
# completed or interrupted one is replayed.
RETRYABLE = ("running", "abandoned", "failed")


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
        policies: PolicyTexts | None = None,
    ) -> None:
        self.graph = graph
        self.settings = settings
        self.leases = leases
        self.repo = repo
        self.metrics = metrics
        self.write_names = write_names
        self.gate = PostGate(settings, metrics)
        self.executor = Executor(
            graph,
            settings,
            leases,
            repo,
            metrics,
            ledger=ledger,
            write_names=write_names,
            policies=policies,
        )
        self.held = HeldThreads(graph, settings, repo, leases)
        self.admission = Admission(
            lambda: len(self.executor.live),
            max_turns=settings.admit_max_turns,
            max_lag_ms=settings.admit_max_lag_ms,
            max_wait_ms=settings.admit_max_wait_ms,
            pool_stats=repo.pool.get_stats,
            refused=lambda: metrics.add("cs_agent_overloaded_total"),
        )
        self.requests = RunRequests(
            repo,
            self.executor.live,
            self.executor.cancel_here,
            log_ttl_s=settings.run_log_ttl_s,
            lease_ttl_s=settings.thread_lease_ttl_s,
        )

    async def wait_idle(self, grace_s: float) -> None:
        await self.executor.wait_idle(grace_s)

    def live(self, run_id: str) -> Run | None:
        return self.executor.live.get(run_id)

    @timed(lock_wait)
    async def _begin(self, run: Run, principal: Principal, client_message_id: str | None) -> Begun:
        """Open the run in one statement; the refusals become their HTTP errors."""
        begun = await self.repo.begin_run(
            run_id=run.run_id,
            thread_id=run.thread_id,
            user_id=principal.user_id,
            session_id=run.session_id,
            client_message_id=client_message_id,
            owner=self.leases.owner,
            ttl_ms=self.leases.ttl_ms,
            rate=self.gate.rate(principal.user_id),
            budget=self.gate.budget,
        )
        if begun.generation is None:
            self.gate.count(begun.status)
            raise self.gate.refuse(begun.status, begun.wait_s)
        run.lease = Lease(run.thread_id, begun.generation, run.run_id, self.leases.ttl_ms)
        self.leases.held(run.lease)
        run.start_checkpoint_id = begun.checkpoint_id
        run.checkpoint_row = begun.checkpoint
        run.policy_version = begun.policy_version
        if begun.stale_run is not None:
            log.warning(
                "took over an expired thread lease; its run is abandoned",
                thread_id=run.thread_id,
                abandoned_run_id=begun.stale_run,
            )
        return begun

    async def post_message(
        self,
        principal: Principal,
        thread_id: str,
        session_id: str,
        content: str,
        client_message_id: str | None,
        *,
        refuse_held: bool = False,
    ) -> Run | dict[str, Any]:
        """Start a turn. Returns the live run, or the recorded result of a retried message
        or of a message stored for the person who holds the thread (`refuse_held`: a
        Conflict instead, for the LangGraph API)."""
        run = Run(run_id=str(uuid.uuid4()), thread_id=thread_id, session_id=session_id)
        begun = await self._begin(run, principal, client_message_id)
        human = HumanMessage(content=content, id=human_message_id(thread_id, client_message_id))
        inputs: list[Any] = [{"incoming": human}]
        try:
            if begun.earlier is not None:  # this client_message_id already has a run
                earlier = begun.earlier
                if earlier["status"] not in RETRYABLE:
                    await self._discard(run)
                    return self._earlier_result(earlier)
                # It failed, or its process died mid-turn (the claim closed it as
                # abandoned): this run takes its client_message_id and does the turn.
                log.warning("retrying a run", run_id=earlier["run_id"], status=earlier["status"])
                await self.repo.retry_run(
                    run.run_id, thread_id, client_message_id or "", self.leases.owner
                )
            if begun.control != "agent":  # a person answers: stored, no run, no model
                if refuse_held:
                    raise Conflict(
                        "a person is answering this conversation", code="human_in_control"
                    )
                return await self.held.store_customer_message(run, human, begun.control)
            if begun.earlier is not None or begun.stale_run is not None:
                with prefetched(thread_id, run.checkpoint_row):
                    inputs = await recovery_inputs(self.graph, self._config(thread_id), human)
        except BaseException:
            await self._discard(run)
            raise
        self.executor.launch(run, principal, inputs, title_from(content))
        return run

    async def resume(
        self, principal: Principal, thread_id: str, session_id: str, decision: str
    ) -> Run:
        run = Run(run_id=str(uuid.uuid4()), thread_id=thread_id, session_id=session_id)
        await self._begin(run, principal, None)
        try:
            with prefetched(thread_id, run.checkpoint_row):
                snapshot = await self.graph.aget_state(self._config(thread_id))
            if snapshot.interrupts:
                graph_input: Any = Command(resume={"decision": decision})
            elif snapshot.next:
                # The decision was taken, and its run died before the step it approved
                # finished: that step goes on now (app/runs/surgery.py, `recovery_inputs`).
                log.warning("finishing a step a dead run left", thread_id=thread_id)
                graph_input = None
            else:
                raise Conflict(
                    "there is no change waiting for confirmation", code="nothing_pending"
                )
        except BaseException:
            await self._discard(run)
            raise
        if isinstance(graph_input, Command):  # the customer's decision on a waiting write
            self.metrics.confirmation(decision)
        self.executor.launch(run, principal, [graph_input], title=None)
        return run

    async def cancel(self, thread_id: str, run_id: str) -> None:
        """Stop a run, wherever it runs: here at once, on another replica through its
        owner's poll. Conflict if it has ended; NotFound if there is no such run."""
        run = self.executor.live.get(run_id)
        if run is not None and run.thread_id == thread_id and not run.ended:
            self.executor.cancel_here(run)
            return
        if await self.repo.request(thread_id, run_id, "cancel"):
            return
        if await self.repo.run(thread_id, run_id) is None:
            raise NotFound("run not found", code="run_not_found")
        raise Conflict("the run has already ended", code="run_finished")

    def _config(self, thread_id: str) -> RunnableConfig:
        return run_config(thread_id, self.settings)

    async def _discard(self, run: Run) -> None:
        """A run that never started: its record goes, its lease is released."""
        if run.lease is not None:
            self.leases.forget(run.lease)
            await asyncio.shield(self.repo.discard_run(run.lease))

    @staticmethod
    def _earlier_result(earlier: dict[str, Any]) -> dict[str, Any]:
        if earlier["result"] is None:  # (a running run has none yet)
            raise ThreadBusy()
        result: dict[str, Any] = {**earlier["result"], "run_id": earlier["run_id"]}
        return result
