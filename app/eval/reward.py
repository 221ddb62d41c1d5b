"""tau-bench's reward: 1 when the shop's final data equals the gold data and every required
output appears in what the agent said; else 0, with the reasons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.eval.snapshot import Snapshot, diff

MAX_DIFF_LINES = 12


@dataclass(frozen=True)
class Reward:
    reward: float
    data_diff: list[str] = field(default_factory=list)
    missing_outputs: list[str] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        out = [f"data: {line}" for line in self.data_diff]
        out += [f"missing output: {o!r}" for o in self.missing_outputs]
        return out


def output_found(output: str, agent_messages: Sequence[str]) -> bool:
    """As tau-bench checks it: in one agent message, ignoring case and commas ("1,234.50"
    counts as "1234.50")."""
    wanted = output.lower()
    return any(wanted in message.lower().replace(",", "") for message in agent_messages)


def score(
    final: Snapshot,
    gold: Snapshot,
    fresh: Snapshot,
    outputs: Sequence[str],
    agent_messages: Sequence[str],
) -> Reward:
    rows = diff(final, gold, fresh)
    lines = [d.describe() for d in rows[:MAX_DIFF_LINES]]
    if len(rows) > MAX_DIFF_LINES:
        lines.append(f"... and {len(rows) - MAX_DIFF_LINES} more rows")
    missing = [o for o in outputs if not output_found(o, agent_messages)]
    return Reward(0.0 if rows or missing else 1.0, lines, missing)


def outcome_reasons(expected: Mapping[str, Any] | None, handoffs: int, declined: int) -> list[str]:
    """A recorded task's ending besides the data: a hand-over to a person when the recorded
    conversation had one (and none when it had not), and the confirmations the customer
    declined then (a declined write changes no data, so only this tells an agent that
    never asked from one that did)."""
    if not expected:
        return []
    reasons = []
    if expected.get("handoff") and not handoffs:
        reasons.append("outcome: no hand-over to a person; the recorded conversation had one")
    elif not expected.get("handoff") and handoffs:
        reasons.append("outcome: handed over to a person; the recorded conversation was not")
    wanted = list(expected.get("declined") or [])
    if declined < len(wanted):
        reasons.append(
            f"outcome: {declined} confirmation(s) declined; the recorded customer declined "
            f"{len(wanted)} ({', '.join(wanted)})"
        )
    return reasons
