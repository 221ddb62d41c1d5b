"""One trial: the simulated customer and the service talk until ###STOP### or the turn cap.

Everything counted comes from what the service itself reports: the SSE events of each run
(tool calls, confirmations, `done.usage`), the thread's state (the transcript, breakers),
and the worker's database (hand-over tickets, the outbox a guest's code arrives in).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.agent.nodes import BUDGET_SPENT
from app.eval.client import RunEvents, ServiceClient
from app.eval.simulator import (
    CONFIRM_QUESTION,
    GREETING,
    INBOX_NOTE,
    SimulatedCustomer,
    is_stop,
    is_yes,
)

Inbox = Callable[[str], Awaitable[list[tuple[str, str]]]]  # thread id -> new (subject, body)


@dataclass
class TrialMetrics:
    customer_turns: int = 0
    agent_runs: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    customer_input_tokens: int = 0
    customer_output_tokens: int = 0
    seconds: float = 0.0
    confirmations: int = 0
    declined: int = 0
    handoffs: int = 0
    breaker_trips: int = 0
    budget_endings: int = 0
    failed_runs: int = 0
    ended: str = ""  # "stop", "max_turns" or "error"


@dataclass
class Conversation:
    customer: SimulatedCustomer
    service: ServiceClient
    subject: str  # the token's user id: a customer's id, or a guest's
    inbox: Inbox
    max_turns: int = 30
    metrics: TrialMetrics = field(default_factory=TrialMetrics)
    session: str = ""
    agent_messages: list[str] = field(default_factory=list)
    # What happened, in order: {"agent": text}, {"customer": line}, {"tool": name, ...}
    transcript: list[dict[str, Any]] = field(default_factory=list)
    _breakers_seen: set[tuple[str, int]] = field(default_factory=set)

    @property
    def thread_id(self) -> str:
        return f"{self.subject}:{self.session}"

    async def play(self) -> TrialMetrics:
        started = time.monotonic()
        try:
            self.session = await self.service.new_thread()
            await self._talk()
        finally:
            self.metrics.seconds = time.monotonic() - started
            self.metrics.customer_input_tokens = self.customer.input_tokens
            self.metrics.customer_output_tokens = self.customer.output_tokens
        await self._read_transcript()
        return self.metrics

    async def _talk(self) -> None:
        line = await self._customer_says(GREETING)
        while not is_stop(line):
            events = await self._run(self.service.send(self.session, line))
            while events.pending:
                if self._out_of_turns():
                    return
                self.metrics.confirmations += len(events.pending)
                line = await self._customer_says(_confirmation(events) + await self._mail())
                approve = is_yes(line)
                self.metrics.declined += 0 if approve else len(events.pending)
                if is_stop(line):
                    break  # the customer left; the write stays unconfirmed and never runs
                events = await self._run(self.service.resume(self.session, approve))
            if is_stop(line) or self._out_of_turns():
                break
            line = await self._customer_says(events.text + await self._mail())
        self.metrics.ended = self.metrics.ended or "stop"

    def _out_of_turns(self) -> bool:
        if self.metrics.customer_turns < self.max_turns:
            return False
        self.metrics.ended = "max_turns"
        return True

    async def _customer_says(self, agent_text: str) -> str:
        line = await self.customer.respond(agent_text)
        self.transcript += [{"agent": agent_text}, {"customer": line}]
        if not is_stop(line):
            self.metrics.customer_turns += 1
        return line

    async def _run(self, call: Awaitable[RunEvents]) -> RunEvents:
        events = await call
        results = {str(r.get("id")): r for r in events.tool_results}
        for c in events.tool_calls:
            result = results.get(str(c.get("id")), {})
            self.transcript.append(
                {"tool": c.get("name"), "args": c.get("args"), "result": result.get("content")}
            )
        if events.errors:
            self.transcript.append({"error": events.errors})
        m = self.metrics
        m.agent_runs += 1
        m.tool_calls += len(events.tool_calls)
        failed = sum(1 for r in events.tool_results if r.get("status") == "error")
        m.tool_errors += failed
        m.input_tokens += events.input_tokens
        m.output_tokens += events.output_tokens
        m.failed_runs += events.status == "failed"
        if not failed:
            return events  # a breaker opens only on an error result (a failure or a refusal)
        state = await self.service.state(self.session, working=True)
        for name, breaker in (state.get("breakers") or {}).items():
            opened = breaker.get("opened_turn") if isinstance(breaker, dict) else None
            if isinstance(opened, int):
                self._breakers_seen.add((name, opened))
        m.breaker_trips = len(self._breakers_seen)
        return events

    async def _mail(self) -> str:
        notes = [INBOX_NOTE.format(subject=s, body=b) for s, b in await self.inbox(self.thread_id)]
        return "".join("\n\n" + n for n in notes)

    async def _read_transcript(self) -> None:
        state = await self.service.state(self.session)
        said = [m for m in state.get("messages", []) if m.get("role") == "assistant"]
        self.agent_messages = [str(m.get("content") or "") for m in said]
        budget = sum(1 for text in self.agent_messages if text == BUDGET_SPENT)
        self.metrics.budget_endings = budget
        self.metrics.model_calls = len(said) - budget


def _confirmation(events: RunEvents) -> str:
    """The pending writes as the agent's question, with the service's own summaries."""
    summaries = [str(p.get("summary") or p.get("name") or "a change") for p in events.pending]
    asked = "\n".join(f"- {s}" for s in summaries)
    lead = events.text.strip()
    prefix = f"{lead}\n\n" if lead else ""
    return f"{prefix}Before I make this change, please confirm:\n{asked}\n{CONFIRM_QUESTION}"
