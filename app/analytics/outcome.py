"""A conversation's outcome, computed from what its turns already recorded: a pure function
of the thread's runs (their message views and usage), the error codes of their event logs,
its write records and its control history. No I/O here; app/analytics/sweep.py loads and
stores.

A run's message views hold the customer's text, the agent's tool calls and each tool
result's status and text; the outcome keeps only counts, per-tool counts and flags (a code
and a sentence written here, never a quote of the conversation).

Time to first token is each run's `runs.ttft_ms` (none for a run that streamed no token);
the slow-answer flag reads it, and a run without one by its time to its end (a turn that
only asked for a confirmation).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.actions.calls import OUTCOME_UNKNOWN
from app.agent.cache import REPEAT_HINT
from app.agent.nodes import BUDGET_SPENT
from app.agent.routing import BREAKER_OPEN, CALL_CAP
from app.agent.tool_exec import DECLINED

# Words a customer uses to ask for a person. A rule, so it explains itself; a model judge
# would catch the rest.
ASKED_FOR_HUMAN = re.compile(
    r"\b(human|real person|a person|someone real|representative|operator|supervisor|"
    r"manager|live agent|speak to (an? )?agent|talk to (an? )?agent)\b",
    re.IGNORECASE,
)
# Error codes of a run that ended because it ran out of time.
DEADLINE_CODES = frozenset({"deadline_exceeded", "run_lost"})


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    status: str  # running | completed | interrupted | failed
    result: dict[str, Any] | None
    created_at: datetime
    finished_at: datetime | None
    error_codes: tuple[str, ...] = ()
    ttft_ms: int | None = None


@dataclass(frozen=True)
class WriteRecord:
    tool_name: str
    ok: bool


@dataclass(frozen=True)
class ThreadRecord:
    thread_id: str
    user_id: str
    created_at: datetime
    activity_at: datetime
    control: str = "agent"  # agent | queued | human, from the lease row
    handoff_reason: str | None = None
    handoff_at: datetime | None = None
    runs: tuple[RunRecord, ...] = ()
    writes: tuple[WriteRecord, ...] = ()


@dataclass(frozen=True)
class Rules:
    late_handoff_turns: int = 4
    slow_answer_s: float = 30.0
    # model -> {"input": usd per million tokens, "output": usd per million tokens}
    price_table: dict[str, dict[str, float]] = field(default_factory=dict)
    model: str = ""


@dataclass
class Outcome:
    thread_id: str
    user_id: str
    result: str
    handoff_reason: str | None
    turns: int
    duration_s: float
    ttft_p50_ms: float | None
    ttft_runs_ms: list[int]
    tool_calls: int
    tool_errors: int
    tool_calls_by_tool: dict[str, int]
    tool_errors_by_tool: dict[str, int]
    breaker_trips: int
    confirmations_asked: int
    confirmations_approved: int
    confirmations_declined: int
    writes_by_tool: dict[str, int]
    model_calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    flags: list[dict[str, str]]
    started_at: datetime
    ended_at: datetime
    activity_at: datetime


def _messages(run: RunRecord) -> list[dict[str, Any]]:
    messages = (run.result or {}).get("messages") or []
    return [m for m in messages if isinstance(m, dict)]


def _normalised(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _template_match(text: str, template: str) -> bool:
    before, _, after = template.partition("{name}")
    return text.startswith(before) and text.endswith(after)


def cost_of(rules: Rules, tokens_in: int, tokens_out: int) -> float:
    price = rules.price_table.get(rules.model) or {}
    usd = tokens_in * float(price.get("input", 0.0)) + tokens_out * float(price.get("output", 0.0))
    return round(usd / 1_000_000, 6)


class _Tally:
    """Walks the runs once, counting and collecting the flags' evidence."""

    def __init__(self) -> None:
        self.flags: list[dict[str, str]] = []
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.breaker_trips = 0
        self.declined: Counter[str] = Counter()
        self.asked = 0
        self.model_calls = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.customer_texts: list[str] = []
        self.turn_of_run: dict[str, int] = {}
        self.ttft_ms: list[int] = []

    def flag(self, code: str, reason: str) -> None:
        if not any(f["code"] == code and f["reason"] == reason for f in self.flags):
            self.flags.append({"code": code, "reason": reason})

    def run(self, run: RunRecord, rules: Rules) -> None:
        usage = (run.result or {}).get("usage") or {}
        self.tokens_in += int(usage.get("input_tokens") or 0)
        self.tokens_out += int(usage.get("output_tokens") or 0)
        self.asked += len((run.result or {}).get("pending") or [])
        messages = _messages(run)
        said = [m for m in messages if m.get("role") == "user" and m.get("author") == "customer"]
        for message in said:
            self._customer_said(str(message.get("content") or ""))
        self.turn_of_run[run.run_id] = len(self.customer_texts)
        turn = len(self.customer_texts)
        errors_this_turn: Counter[tuple[str, str]] = Counter()
        for message in messages:
            role = message.get("role")
            if role == "assistant" and message.get("author") == "agent":
                self.model_calls += 1
                if message.get("content") == BUDGET_SPENT:
                    self.flag(
                        "guard_ended_turn",
                        f"The step budget ended turn {turn} before the agent could answer.",
                    )
            elif role == "tool":
                self._tool_result(message, turn, errors_this_turn)
        for (name, _), n in errors_this_turn.items():
            if n >= 2:
                self.flag(
                    "repeated_tool_error",
                    f"{name} failed {n} times with the same error in turn {turn}.",
                )
        if run.status == "failed":
            codes = ", ".join(run.error_codes) or "no error code recorded"
            ended = "ran out of time" if DEADLINE_CODES & set(run.error_codes) else "failed"
            # A failed turn stores nothing, its customer message neither: name the run by
            # the turn it follows then.
            which = f"The run of turn {turn}" if said else f"The run after turn {turn}"
            which = "The first run" if not said and turn == 0 else which
            self.flag("failed_run", f"{which} {ended} ({codes}).")
        if run.ttft_ms is not None:
            self.ttft_ms.append(run.ttft_ms)
        if said:
            self._slow(run, turn, rules)

    def _slow(self, run: RunRecord, turn: int, rules: Rules) -> None:
        if run.ttft_ms is not None:
            took, what = run.ttft_ms / 1000, "first word of the answer"
        elif run.finished_at is not None:
            took, what = (run.finished_at - run.created_at).total_seconds(), "answer"
        else:
            return
        if took > rules.slow_answer_s:
            self.flag(
                "slow_answer",
                f"The {what} to turn {turn} took {took:.0f} s "
                f"(more than {rules.slow_answer_s:g} s).",
            )

    def _customer_said(self, text: str) -> None:
        turn = len(self.customer_texts) + 1
        normal = _normalised(text)
        if normal and normal in self.customer_texts:
            earlier = self.customer_texts.index(normal) + 1
            self.flag(
                "customer_repeated",
                f"The customer sent the same message in turn {turn} as in turn {earlier}.",
            )
        if ASKED_FOR_HUMAN.search(text):
            self.flag("asked_for_human", f"The customer asked for a person in turn {turn}.")
        self.customer_texts.append(normal)

    def _tool_result(
        self, message: dict[str, Any], turn: int, errors: Counter[tuple[str, str]]
    ) -> None:
        name = str(message.get("name") or "unknown")
        content = str(message.get("content") or "")
        if content == DECLINED:
            self.declined[name] += 1
            self.flag("declined_write", f"The customer declined {name} in turn {turn}.")
            return  # a declined write was asked, not called
        self.calls[name] += 1
        if message.get("status") != "error":
            return
        if content == OUTCOME_UNKNOWN:
            self.flag(
                "write_outcome_unknown",
                f"{name} was sent in turn {turn} and its outcome is unknown; a person checks it.",
            )
        self.errors[name] += 1
        if _template_match(content, BREAKER_OPEN) or _template_match(content, CALL_CAP):
            self.breaker_trips += 1
            self.flag(
                "guard_ended_turn",
                f"A breaker refused {name} in turn {turn} (failing or called too often).",
            )
        errors[(name, content.removesuffix(REPEAT_HINT))] += 1


def _result(thread: ThreadRecord) -> str:
    last = thread.runs[-1] if thread.runs else None
    if thread.handoff_at is not None or thread.control != "agent":
        return "handed_off"
    if last is not None and last.status == "failed":
        return "failed"
    if last is not None and last.status in ("interrupted", "running"):
        return "abandoned"
    return "resolved"


def compute(thread: ThreadRecord, rules: Rules) -> Outcome:
    tally = _Tally()
    for run in thread.runs:
        tally.run(run, rules)
    last = thread.runs[-1] if thread.runs else None
    unanswered = len((last.result or {}).get("pending") or []) if last else 0
    if last is not None and last.status != "interrupted":
        unanswered = 0
    declined = sum(tally.declined.values())
    result = _result(thread)
    turns = len(tally.customer_texts)
    if result == "handed_off":
        at_turn = turns
        if thread.handoff_at is not None:
            before = [r for r in thread.runs if r.created_at <= thread.handoff_at]
            at_turn = max((tally.turn_of_run[r.run_id] for r in before), default=turns)
        if at_turn > rules.late_handoff_turns:
            tally.flag(
                "late_handoff",
                f"The conversation was handed off after {at_turn} turns "
                f"(more than {rules.late_handoff_turns}).",
            )
    for name, n in sorted(Counter(w.tool_name for w in thread.writes if not w.ok).items()):
        times = "once" if n == 1 else f"{n} times"
        tally.flag("policy_refusal", f"A business rule refused {name} {times}.")
    started = min([thread.created_at, *(r.created_at for r in thread.runs)])
    ended = max([started, *(r.finished_at or r.created_at for r in thread.runs)])
    if thread.handoff_at is not None:
        ended = max(ended, thread.handoff_at)
    return Outcome(
        thread_id=thread.thread_id,
        user_id=thread.user_id,
        result=result,
        handoff_reason=thread.handoff_reason if result == "handed_off" else None,
        turns=turns,
        duration_s=round((ended - started).total_seconds(), 3),
        ttft_p50_ms=float(statistics.median(tally.ttft_ms)) if tally.ttft_ms else None,
        ttft_runs_ms=tally.ttft_ms,
        tool_calls=sum(tally.calls.values()),
        tool_errors=sum(tally.errors.values()),
        tool_calls_by_tool=dict(sorted(tally.calls.items())),
        tool_errors_by_tool=dict(sorted(tally.errors.items())),
        breaker_trips=tally.breaker_trips,
        confirmations_asked=tally.asked,
        confirmations_approved=max(0, tally.asked - declined - unanswered),
        confirmations_declined=declined,
        writes_by_tool=dict(sorted(Counter(w.tool_name for w in thread.writes if w.ok).items())),
        model_calls=tally.model_calls,
        tokens_in=tally.tokens_in,
        tokens_out=tally.tokens_out,
        cost_usd=cost_of(rules, tally.tokens_in, tally.tokens_out),
        flags=tally.flags,
        started_at=started,
        ended_at=ended,
        activity_at=thread.activity_at,
    )
