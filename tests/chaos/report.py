"""The soak's report: report.md and report.json, and throughput.png beside them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tests.chaos.soak import Outcome

BUCKET_S = 5.0


def write(outcome: Outcome) -> Path:
    out = outcome.settings.out
    chart = out / "throughput.png"
    _chart(outcome, chart)
    data = as_json(outcome)
    (out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "faults.log").write_text(
        "".join(
            f"{f['start_s']:9.2f} {f['end_s']:9.2f}  {f['kind']:<22} {f['target']:<20}"
            f" {f['note']}\n"
            for f in data["faults"]
        )
    )
    path = out / "report.md"
    path.write_text(markdown(outcome, data))
    return path


def as_json(outcome: Outcome) -> dict[str, Any]:
    t0 = outcome.records.started
    r = outcome.records
    return {
        "seed": outcome.settings.seed,
        "duration_s": outcome.settings.duration_s,
        "wall_s": round(outcome.wall_s, 1),
        "violations": outcome.violations,
        "invariants": [
            {"name": i.name, "count": i.count, "promise": i.promise, "examples": i.examples}
            for i in outcome.invariants
        ],
        "settle": {
            "clients_done_s": round(outcome.clients_done_s, 1),
            "settled_s": None if outcome.settled_s is None else round(outcome.settled_s, 1),
        },
        "faults_by_kind": dict(sorted(outcome.injector.counts().items())),
        "faults": [
            {
                "kind": f.kind,
                "target": f.target,
                "start_s": round(f.started - t0, 2),
                "end_s": round((f.ended or f.started) - t0, 2),
                "note": f.note,
            }
            for f in outcome.injector.log
        ],
        "operations": [
            {"kind": kind, "outcome": result, "count": n}
            for (kind, result), n in sorted(r.ops.items())
        ],
        "client_events": dict(sorted(r.events.items())),
        "http_5xx": [
            {
                "at_s": round(e.sent - t0, 2),
                "took_s": round(e.answered - e.sent, 2),
                "status": e.status,
                "request": f"{e.method} {e.path}",
                "body": e.body,
            }
            for e in r.errors_5xx
        ],
        "turns_completed": len(r.completed_at),
        "runs_read": len(r.runs),
    }


def markdown(outcome: Outcome, data: dict[str, Any]) -> str:
    s = outcome.settings
    settled = data["settle"]["settled_s"]
    lines = [
        f"# Chaos soak: seed {s.seed}, {s.duration_s:.0f} s of faults",
        "",
        f"**{'PASS' if outcome.violations == 0 else 'FAIL'}**: {outcome.violations} violations;"
        f" {len(outcome.injector.log)} faults, {sum(outcome.records.ops.values())} operations,"
        f" {data['turns_completed']} turns completed; {data['wall_s']:.0f} s wall time.",
        "",
        "Settling after the last fault: the customers' last operations were done after"
        f" {data['settle']['clients_done_s']:.1f} s; the system was quiet (every replica"
        " ready, no run running, no lease held, no webhook pending, a fresh read answered in"
        " each pool) after "
        + (f"{settled:.1f} s." if settled is not None else "**it never settled**."),
        "",
        "## Invariants (each must be 0)",
        "",
        "| invariant | count | what it means |",
        "|---|---|---|",
        *(f"| `{i.name}` | {i.count} | {i.promise} |" for i in outcome.invariants),
        "",
    ]
    for i in outcome.invariants:
        if i.examples:
            lines += [f"`{i.name}` examples:", "", *(f"- {e}" for e in i.examples), ""]
    lines += [
        "## Faults by kind",
        "",
        "| fault | count |",
        "|---|---|",
        *(f"| {k} | {n} |" for k, n in data["faults_by_kind"].items()),
        "",
        "Each fault with its start and end (seconds from the start) is in `faults.log`.",
        "",
        "## Operations by kind and outcome",
        "",
        "| operation | outcome | count |",
        "|---|---|---|",
        *(f"| {o['kind']} | {o['outcome']} | {o['count']} |" for o in data["operations"]),
        "",
        "## What the clients went through",
        "",
        "| event | count |",
        "|---|---|",
        *(f"| {k} | {n} |" for k, n in data["client_events"].items()),
        "",
        "## Throughput",
        "",
        f"![turns completed per {BUCKET_S:.0f} s, faults marked](throughput.png)",
        "",
    ]
    return "\n".join(lines)


def _chart(outcome: Outcome, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = outcome.records.started
    done = [t - t0 for t in outcome.records.completed_at]
    end = max([*done, outcome.fault_phase[1] - t0, 1.0])
    buckets = Counter(int(t // BUCKET_S) for t in done)
    xs = [b * BUCKET_S for b in range(int(end // BUCKET_S) + 1)]
    ys = [buckets.get(b, 0) / BUCKET_S for b in range(len(xs))]
    kinds = sorted({f.kind for f in outcome.injector.log})
    fig, (top, bottom) = plt.subplots(
        2, 1, sharex=True, figsize=(12, 3 + 0.25 * len(kinds)),
        gridspec_kw={"height_ratios": [2, max(1, len(kinds) * 0.25)]},
    )  # fmt: skip
    top.step(xs, ys, where="post", color="black")
    top.set_ylabel("turns completed / s")
    top.axvline(outcome.fault_phase[1] - t0, color="grey", linestyle="--")
    top.set_title(f"seed {outcome.settings.seed}: throughput, faults below (dashed: faults stop)")
    colors = plt.get_cmap("tab20")
    for row, kind in enumerate(kinds):
        spans = [
            (f.started - t0, max((f.ended or f.started) - f.started, 0.3))
            for f in outcome.injector.log
            if f.kind == kind
        ]
        bottom.broken_barh(spans, (row - 0.4, 0.8), color=colors(row % 20))
        for start, _ in spans:
            top.axvspan(start, start + 0.3, color=colors(row % 20), alpha=0.3)
    bottom.set_yticks(range(len(kinds)), kinds, fontsize=7)
    bottom.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
