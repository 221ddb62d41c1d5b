"""Run every task K times on N workers and score each trial.

Trials go out trial-major (every task once, then every task again), so the running pass^1
printed as they finish means something early. The runner talks to the services and to the
customer's model only: never to the agent's model.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.eval.client import ServiceClient
from app.eval.conversation import Conversation, TrialMetrics
from app.eval.gold import Gold
from app.eval.reward import outcome_reasons, score
from app.eval.scripted import LABEL, ScriptedChat
from app.eval.simulator import ChatModel, SimulatedCustomer
from app.eval.tasks import Task
from app.eval.workers import Progress, Workbench, Worker
from app.identity import GUEST_PREFIX


@dataclass(frozen=True)
class CustomerModel:
    """Who plays the customer: a chat model, its name, and whether it is the built-in one
    (no model, no cost)."""

    chat: ChatModel
    model: str
    builtin: bool = False

    @property
    def label(self) -> str:
        return LABEL if self.builtin else self.model


def builtin_customer(tasks: Sequence[Task]) -> CustomerModel:
    return CustomerModel(ScriptedChat(tasks), "scripted", builtin=True)


@dataclass
class TrialResult:
    task_id: str
    trial: int
    reward: float
    reasons: list[str]
    metrics: TrialMetrics
    worker: int
    transcript: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TaskResult:
    task: Task
    refused: str | None = None  # unsolvable-by-policy: why our rules refuse a gold action
    trials: list[TrialResult] = field(default_factory=list)

    @property
    def solvable(self) -> bool:
        return self.refused is None

    @property
    def successes(self) -> int:
        return sum(1 for t in self.trials if t.reward == 1.0)


@dataclass
class RunOptions:
    trials: int = 1
    guest: bool = False
    max_turns: int = 30
    progress: Progress = print


@dataclass
class _Totals:
    done: int = 0
    passed: int = 0
    tokens: int = 0


async def run_tasks(
    bench: Workbench, tasks: Sequence[Task], customer: CustomerModel, options: RunOptions
) -> list[TaskResult]:
    results = [TaskResult(task) for task in tasks]
    golds: dict[str, Gold] = {}
    for result in results:
        gold = await bench.gold(result.task)
        golds[result.task.id] = gold
        result.refused = gold.refused
    queue: asyncio.Queue[tuple[TaskResult, int]] = asyncio.Queue()
    for trial in range(1, options.trials + 1):
        for result in results:
            if result.solvable:
                queue.put_nowait((result, trial))
    totals = _Totals()
    total = queue.qsize()

    async def work(worker: Worker) -> None:
        while not queue.empty():
            result, trial = queue.get_nowait()
            gold = golds[result.task.id]
            outcome = await _trial(bench, worker, result.task, trial, gold, customer, options)
            result.trials.append(outcome)
            totals.done += 1
            totals.passed += outcome.reward == 1.0
            m = outcome.metrics
            totals.tokens += m.input_tokens + m.output_tokens
            options.progress(
                f"[{totals.done}/{total}] task {result.task.id} trial {trial}: "
                f"reward {outcome.reward:.0f} | pass^1 so far {totals.passed / totals.done:.3f}"
                f" | agent tokens so far {totals.tokens:,}"
            )

    await asyncio.gather(*(work(w) for w in bench.workers))
    for result in results:
        result.trials.sort(key=lambda t: t.trial)
    return results


async def _trial(
    bench: Workbench,
    worker: Worker,
    task: Task,
    trial: int,
    gold: Gold,
    customer: CustomerModel,
    options: RunOptions,
) -> TrialResult:
    assert gold.snapshot is not None
    await bench.reset(worker)
    if gold.start is not None:
        await bench.begin(worker, gold.start)
    guest = options.guest
    subject = f"{GUEST_PREFIX}{uuid.uuid4().hex[:16]}" if guest else task.user_id
    assert worker.http is not None
    service = ServiceClient(worker.http, bench.token(subject, "guest" if guest else "customer"))
    seen = [0]
    conversation = Conversation(
        customer=SimulatedCustomer(customer.chat, task.instruction, guest=guest),
        service=service,
        subject=subject,
        inbox=lambda thread_id: worker.new_mail(thread_id, seen),
        max_turns=options.max_turns,
    )
    try:
        metrics = await conversation.play()
    except Exception as error:  # a trial that breaks scores 0 and the run goes on
        conversation.metrics.ended = "error"
        reasons = [f"error: {type(error).__name__}: {error}"[:500]]
        worker.changes = None
        return TrialResult(
            task.id,
            trial,
            0.0,
            reasons,
            conversation.metrics,
            worker.index,
            conversation.transcript,
        )
    metrics.handoffs = await worker.handoffs(conversation.thread_id)
    final = await bench.settle(worker)
    reward = score(final, gold.snapshot, bench.baseline, task.outputs, conversation.agent_messages)
    unlike = outcome_reasons(task.expected, metrics.handoffs, metrics.declined)
    return TrialResult(
        task.id,
        trial,
        0.0 if unlike else reward.reward,
        reward.reasons + unlike,
        metrics,
        worker.index,
        conversation.transcript,
    )
