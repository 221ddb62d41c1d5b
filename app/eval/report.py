"""pass^k, cost, and what a run leaves: results.json, report.md and transcripts/."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from math import comb
from pathlib import Path
from statistics import mean
from typing import Any

from app.eval.runner import TaskResult, TrialResult

Prices = Mapping[str, tuple[float, float]]  # model -> USD per million (input, output) tokens


def pass_hat_k(results: Sequence[TaskResult], k: int) -> float | None:
    """tau-bench's pass^k: the chance that k trials drawn from a task's n all succeed,
    C(c, k) / C(n, k) for c successes, averaged over the tasks (unsolvable ones left out)."""
    scored = [r for r in results if r.solvable and len(r.trials) >= k]
    if not scored:
        return None
    return mean(comb(r.successes, k) / comb(len(r.trials), k) for r in scored)


def price_of(model: str, prices: Prices, *, builtin: bool = False) -> tuple[float, float] | None:
    if builtin:
        return (0.0, 0.0)
    return prices.get(model)


def cost(input_tokens: int, output_tokens: int, price: tuple[float, float] | None) -> float | None:
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000


@dataclass
class EvalRun:
    tasks_file: str
    data: str
    agent_model: str
    agent_price: tuple[float, float] | None
    customer_model: str
    customer_price: tuple[float, float] | None
    mode: str  # "customer" (signed in) or "guest" (one-time code)
    confirmation: str
    trials: int
    concurrency: int
    started_at: str
    seconds: float
    results: list[TaskResult] = field(default_factory=list)

    def trial_cost(self, t: TrialResult) -> float | None:
        m = t.metrics
        agent = cost(m.input_tokens, m.output_tokens, self.agent_price)
        customer = cost(m.customer_input_tokens, m.customer_output_tokens, self.customer_price)
        return None if agent is None or customer is None else agent + customer

    def pass_hat(self) -> dict[int, float | None]:
        return {k: pass_hat_k(self.results, k) for k in range(1, self.trials + 1)}


def results_json(run: EvalRun) -> dict[str, Any]:
    return {
        "tasks_file": run.tasks_file,
        "data": run.data,
        "agent_model": run.agent_model,
        "customer_model": run.customer_model,
        "mode": run.mode,
        "confirmation": run.confirmation,
        "trials": run.trials,
        "concurrency": run.concurrency,
        "started_at": run.started_at,
        "seconds": round(run.seconds, 1),
        "pass_hat_k": {str(k): v for k, v in run.pass_hat().items()},
        "tasks": [
            {
                "id": r.task.id,
                "user_id": r.task.user_id,
                "unsolvable_by_policy": r.refused,
                "successes": r.successes,
                "trials": [
                    {
                        "trial": t.trial,
                        "reward": t.reward,
                        "reasons": t.reasons,
                        "cost_usd": run.trial_cost(t),
                        "worker": t.worker,
                        **asdict(t.metrics),
                    }
                    for t in r.trials
                ],
            }
            for r in run.results
        ],
    }


def write(run: EvalRun, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results_json(run), indent=2, ensure_ascii=False)
    (out_dir / "results.json").write_text(text + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(report_md(run), encoding="utf-8")
    folder = out_dir / "transcripts"
    folder.mkdir(exist_ok=True)
    for r in run.results:
        for t in r.trials:
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{r.task.id}--trial{t.trial}") + ".json"
            body = json.dumps(t.transcript, indent=1, ensure_ascii=False, default=str)
            (folder / name).write_text(body + "\n", encoding="utf-8")


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def _avg(values: Sequence[float]) -> float:
    return mean(values) if values else 0.0


def report_md(run: EvalRun) -> str:
    trials = [t for r in run.results for t in r.trials]
    lines = [
        f"# Evaluation: {run.tasks_file}",
        "",
        f"- started {run.started_at}, took {run.seconds:.0f} s; data: {run.data}",
        f"- agent model: **{run.agent_model}** (the service's); simulated customer: "
        f"**{run.customer_model}**",
        f"- signed in as: {run.mode}; write confirmation: {run.confirmation}; "
        f"{run.trials} trial(s) per task on {run.concurrency} worker(s)",
        "",
        "| k | pass^k |",
        "|---|---|",
    ]
    for k, value in run.pass_hat().items():
        lines.append(f"| {k} | {'n/a' if value is None else f'{value:.3f}'} |")
    lines += ["", *_totals(run, trials), "", *_per_task(run), "", *_failures(run)]
    unsolvable = [r for r in run.results if not r.solvable]
    if unsolvable:
        lines += ["", "## Unsolvable by policy (not scored)", ""]
        lines += [f"- task {r.task.id}: {r.refused}" for r in unsolvable]
    return "\n".join(lines) + "\n"


def _totals(run: EvalRun, trials: Sequence[TrialResult]) -> list[str]:
    ms = [t.metrics for t in trials]
    costs = [run.trial_cost(t) for t in trials]
    known = [c for c in costs if c is not None]
    passed = [t.metrics.seconds for t in trials if t.reward == 1.0]
    agent_in, agent_out = sum(m.input_tokens for m in ms), sum(m.output_tokens for m in ms)
    cust_in = sum(m.customer_input_tokens for m in ms)
    cust_out = sum(m.customer_output_tokens for m in ms)
    return [
        "## Totals",
        "",
        f"- trials: {len(trials)}, reward 1: {sum(1 for t in trials if t.reward == 1.0)}",
        f"- agent tokens: {agent_in:,} in, {agent_out:,} out; customer tokens: {cust_in:,} in, "
        f"{cust_out:,} out",
        f"- cost: {_money(sum(known) if len(known) == len(costs) else None)} in all, "
        f"{_money(_avg(known) if known and len(known) == len(costs) else None)} per trial "
        "(prices: MODEL_PRICES)",
        f"- mean time to resolution: {_avg([m.seconds for m in ms]):.1f} s "
        f"({_avg(passed):.1f} s for the trials that passed)",
        f"- confirmations asked {sum(m.confirmations for m in ms)}, declined "
        f"{sum(m.declined for m in ms)}; handoffs {sum(m.handoffs for m in ms)}; breaker "
        f"trips {sum(m.breaker_trips for m in ms)}; step-budget endings "
        f"{sum(m.budget_endings for m in ms)}; failed runs {sum(m.failed_runs for m in ms)}; "
        f"conversations cut at the turn cap {sum(1 for m in ms if m.ended == 'max_turns')}",
    ]


def _per_task(run: EvalRun) -> list[str]:
    lines = [
        "## Per task (means per trial; counts summed over trials)",
        "",
        "| task | rewards | turns | tool calls | model calls | tokens in/out | cost | time s "
        "| confirm. (declined) | handoffs | breaker trips | budget ends |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in run.results:
        if not r.solvable or not r.trials:
            continue
        ms = [t.metrics for t in r.trials]
        costs = [run.trial_cost(t) for t in r.trials]
        avg_cost = None if None in costs else _avg([c for c in costs if c is not None])
        rewards = " ".join(f"{t.reward:.0f}" for t in r.trials)
        lines.append(
            f"| {r.task.id} | {rewards} | {_avg([m.customer_turns for m in ms]):.1f} "
            f"| {_avg([m.tool_calls for m in ms]):.1f} | {_avg([m.model_calls for m in ms]):.1f} "
            f"| {_avg([m.input_tokens for m in ms]):,.0f}/"
            f"{_avg([m.output_tokens for m in ms]):,.0f} | {_money(avg_cost)} "
            f"| {_avg([m.seconds for m in ms]):.1f} "
            f"| {sum(m.confirmations for m in ms)} ({sum(m.declined for m in ms)}) "
            f"| {sum(m.handoffs for m in ms)} | {sum(m.breaker_trips for m in ms)} "
            f"| {sum(m.budget_endings for m in ms)} |"
        )
    return lines


def _failures(run: EvalRun) -> list[str]:
    lines = ["## Why trials scored 0", ""]
    failed = [(r, t) for r in run.results for t in r.trials if t.reward != 1.0]
    if not failed:
        return [*lines, "None."]
    for r, t in failed:
        lines.append(f"- task {r.task.id} trial {t.trial} (ended: {t.metrics.ended}):")
        lines += [f"  - {reason}" for reason in t.reasons or ["(no reason recorded)"]]
    return lines
