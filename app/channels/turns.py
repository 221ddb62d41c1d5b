"""A channel's message as a turn of its thread: the same runs, confirmations and control as
the chat page, with no HTTP client attached.

The turn runs in the executor's background task as any other (app/runs/executor.py); the
channel's worker waits for its end and reads the result the run recorded. A message's
`client_message_id` is derived from the channel's own id for it, so a message processed
again after a crash replays the recorded turn instead of running it twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import psycopg

from app.agent.graph import run_config
from app.channels.store import ChannelStore, Conversation, Inbound
from app.errors import AppError, Conflict, RateLimited, ThreadBusy
from app.identity import Principal
from app.runs.run import Run
from app.runs.service import RunService
from app.threads.control import Controls

# A turn whose run ended so (the model or the database away, its process dead) is tried
# again later with the same client_message_id: the retry runs it, as the page's retry does.
RETRY_STATUSES = ("failed", "abandoned")
_YES = re.compile(r"^\W*(yes|y|approve|approved|confirm|confirmed|ok|okay)\W*$", re.IGNORECASE)
_NO = re.compile(r"^\W*(no|n|decline|declined|reject|cancel|stop)\W*$", re.IGNORECASE)
CHANNEL_STAFF = "chatwoot"  # the assignee of a thread Chatwoot's people hold


class TryLater(Exception):
    """The message could not be handled now (thread busy, a limit, the model or database
    away): its row is due again after `after_s`. `counts`: a failure towards giving the
    message up; waiting for a busy thread or a limit is not one."""

    def __init__(self, reason: str, after_s: float = 1.0, *, counts: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.after_s = after_s
        self.counts = counts


@dataclass(frozen=True)
class TurnOutcome:
    status: str  # completed | interrupted | handed_off | cancelled | ...
    answer: str  # the agent's words in this turn, for the customer
    pending: list[dict[str, Any]] = field(default_factory=list)  # writes awaiting a yes


def decision_in(text: str) -> str | None:
    """'approve' for a plain yes, 'reject' for a plain no (on the first line: an email's
    "Sent from my phone" follows it), None for anything else."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if _YES.match(first):
        return "approve"
    if _NO.match(first):
        return "reject"
    return None


def outcome_of(result: dict[str, Any]) -> TurnOutcome:
    if result.get("status") == "cancelled":  # a person took over mid-answer: no cut answer
        return TurnOutcome(status="cancelled", answer="")
    answer = "\n\n".join(
        str(m["content"]).strip()
        for m in result.get("messages", [])
        if m.get("role") == "assistant" and str(m.get("content") or "").strip()
    )
    return TurnOutcome(
        status=str(result.get("status")),
        answer=answer,
        pending=list(result.get("pending") or []),
    )


class ChannelTurns:
    def __init__(self, runs: RunService, controls: Controls, store: ChannelStore) -> None:
        self.runs = runs
        self.controls = controls
        self.store = store

    async def message(self, conv: Conversation, text: str, message_key: str) -> TurnOutcome:
        principal = Principal(conv.user_id, conv.role)  # type: ignore[arg-type]
        outcome = await self._start(
            self.runs.post_message(
                principal, conv.thread_id, conv.session_id, text, message_key[:128]
            )
        )
        return await self._settle(outcome)

    async def decide(self, conv: Conversation, decision: str, item: Inbound) -> TurnOutcome | None:
        """Resume the waiting write with the customer's decision; None: nothing waits.

        A resume has no client_message_id to replay by, so the run it started is noted on
        the message first: handled again after a crash, the message reads that run's
        recorded result (or, if the run died, decides again: the resume finishes a step a
        dead run left, app/runs/service.py)."""
        noted = item.body.get("run_id")
        if isinstance(noted, str):
            recorded = await self.store.run_result(conv.thread_id, noted)
            if recorded is not None and recorded[0] not in ("running", *RETRY_STATUSES):
                return outcome_of(recorded[1])
        principal = Principal(conv.user_id, conv.role)  # type: ignore[arg-type]
        try:
            run = await self._start(
                self.runs.resume(principal, conv.thread_id, conv.session_id, decision)
            )
        except Conflict as error:
            if error.code == "nothing_pending":
                return None
            raise
        await self.store.note_run(item.id, run.run_id)
        return await self._settle(run)

    async def pending(self, conv: Conversation) -> bool:
        """Whether a write of the thread waits for the customer's yes."""
        config = run_config(conv.thread_id, self.runs.settings)
        snapshot = await self.runs.graph.aget_state(config)
        return bool(snapshot.interrupts)

    async def control(self, conv: Conversation) -> dict[str, Any]:
        return await self.controls.get(conv.thread_id)

    async def hold_for_channel(
        self, conv: Conversation, *, from_agent: bool = False
    ) -> dict[str, Any] | None:
        """A thread the agent handed off (queued; `from_agent`: also one the agent answers)
        is taken by the channel's people: control `human`, assignee `chatwoot`. Returns the
        control, or None when it was in neither state."""
        control = await self.controls.get(conv.thread_id)
        if control["state"] != "queued" and not (from_agent and control["state"] == "agent"):
            return None
        staff = Principal(CHANNEL_STAFF, "staff", name="Chatwoot")
        try:
            return await self.controls.change(
                conv.thread_id, "take_over", control["version"], staff
            )
        except Conflict:  # someone in the console accepted it meanwhile
            return None

    async def release_from_channel(self, conv: Conversation) -> bool:
        """The channel's people hand the thread back to the agent."""
        control = await self.controls.get(conv.thread_id)
        if control["state"] != "human" or control["assignee"] != CHANNEL_STAFF:
            return False
        staff = Principal(CHANNEL_STAFF, "staff", name="Chatwoot")
        try:
            await self.controls.change(conv.thread_id, "release", control["version"], staff)
        except Conflict:
            return False
        return True

    @staticmethod
    async def _start(started: Any) -> Any:
        try:
            return await started
        except ThreadBusy as busy:  # a live run, or a dead process's lease until it expires
            raise TryLater("thread_busy", float(busy.retry_after_s), counts=False) from busy
        except RateLimited as limited:
            after = float(limited.retry_after_s)
            raise TryLater("rate_limited", after, counts=False) from limited
        except psycopg.OperationalError as error:
            raise TryLater("database_unavailable", 2.0) from error
        except AppError as error:
            if error.status_code >= 500:
                raise TryLater(error.code, 2.0) from error
            raise

    @staticmethod
    async def _settle(outcome: Run | dict[str, Any]) -> TurnOutcome:
        if isinstance(outcome, Run):
            await outcome.finished.wait()
            result = outcome.result or {"status": "failed"}
        else:
            result = outcome
        if result.get("status") in RETRY_STATUSES:
            raise TryLater(f"turn_{result.get('status')}", 2.0)
        return outcome_of(result)
