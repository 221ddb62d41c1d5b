"""tau-bench's reward: 1 when the shop's final data equals the gold data and every required
output appears in what the agent said; else 0, with the reasons."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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
