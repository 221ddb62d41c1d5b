"""`cs-agent eval compare BASELINE CANDIDATE`: two eval runs task by task.

Each folder is an eval's `--out` (its `results.json` and `transcripts/`). Per task: the
rewards before and after, the tool calls that differ, and the cost and time; over the run:
pass^k. A task *regressed* when every baseline trial passed and some candidate trial did
not; it *improved* the other way round. Rates that moved otherwise read as better or worse.

The tool calls compared are one trial's of each run: the candidate's first failing trial
when it has one (that is where the difference matters), else its first; the baseline's
first passing trial when it has one, else its first. Calls equal in name and arguments are
matched first, whatever their order; of the rest, calls of the same tool are paired in
order as "different arguments"; what is left was added or is missing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from app.tools.registry import WRITE_TOOL_NAMES

Json = dict[str, Any]


class RunFolderError(ValueError):
    """A folder that holds no eval run; the message says which and why."""


@dataclass(frozen=True)
class Run:
    folder: Path
    results: Json

    @classmethod
    def read(cls, folder: Path) -> Run:
        path = folder / "results.json"
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunFolderError(f"{folder}: no results.json (is it an eval's --out?)") from None
        except json.JSONDecodeError as e:
            raise RunFolderError(f"{path}: not valid JSON ({e.msg})") from None
        if not isinstance(results, dict) or not isinstance(results.get("tasks"), list):
            raise RunFolderError(f"{path}: not an eval's results")
        return cls(folder, results)

    def tasks(self) -> dict[str, Json]:
        return {str(t["id"]): t for t in self.results["tasks"]}

    def tool_calls(self, task_id: str, trial: int) -> list[Json]:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{task_id}--trial{trial}") + ".json"
        try:
            steps = json.loads((self.folder / "transcripts" / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [
            {"name": str(s["tool"]), "args": s.get("args") or {}}
            for s in steps
            if isinstance(s, dict) and s.get("tool")
        ]


@dataclass
class ActionDiff:
    added: list[Json] = field(default_factory=list)
    missing: list[Json] = field(default_factory=list)
    changed: list[Json] = field(default_factory=list)  # {name, baseline, candidate, differs}

    def empty(self) -> bool:
        return not (self.added or self.missing or self.changed)


def diff_actions(baseline: Sequence[Json], candidate: Sequence[Json]) -> ActionDiff:
    left, right = list(baseline), list(candidate)
    for call in list(left):  # the same call, wherever it is
        twin = next((c for c in right if c == call), None)
        if twin is not None:
            left.remove(call)
            right.remove(twin)
    out = ActionDiff()
    for call in left:
        other = next((c for c in right if c["name"] == call["name"]), None)
        if other is None:
            out.missing.append(call)
            continue
        right.remove(other)
        keys = sorted(set(call["args"]) | set(other["args"]))
        differs = {
            k: [call["args"].get(k), other["args"].get(k)]
            for k in keys
            if call["args"].get(k) != other["args"].get(k)
        }
        out.changed.append(
            {
                "name": call["name"],
                "baseline": call["args"],
                "candidate": other["args"],
                "differs": differs,
            }
        )
    out.added = right
    return out


def _rewards(task: Json | None) -> list[float]:
    return [float(t["reward"]) for t in (task or {}).get("trials", [])]


def _mean_of(task: Json | None, key: str) -> float | None:
    values = [t.get(key) for t in (task or {}).get("trials", [])]
    known = [float(v) for v in values if v is not None]
    return mean(known) if known and len(known) == len(values) else None


def _status(before: Json | None, after: Json | None) -> str:
    if before is None:
        return "new"
    if after is None:
        return "dropped"
    if before.get("unsolvable_by_policy") or after.get("unsolvable_by_policy"):
        return "unsolvable"
    b, a = _rewards(before), _rewards(after)
    if not b or not a:
        return "not run"
    passed_before, passed_after = min(b) == 1.0, min(a) == 1.0
    if passed_before and not passed_after:
        return "regressed"
    if passed_after and not passed_before:
        return "improved"
    if mean(a) != mean(b):
        return "worse" if mean(a) < mean(b) else "better"
    return "same"


def _pick(task: Json | None, *, failing: bool) -> int | None:
    trials = (task or {}).get("trials", [])
    if not trials:
        return None
    wanted = [t for t in trials if (t["reward"] != 1.0) == failing]
    return int((wanted or trials)[0]["trial"])


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else round(after - before, 6)


def compare(baseline: Run, candidate: Run) -> Json:
    before, after = baseline.tasks(), candidate.tasks()
    tasks = []
    for task_id in [*before, *(i for i in after if i not in before)]:
        b, a = before.get(task_id), after.get(task_id)
        row: Json = {"id": task_id, "status": _status(b, a)}
        for label, task in (("baseline", b), ("candidate", a)):
            row[label] = None
            if task is not None:
                row[label] = {
                    "rewards": _rewards(task),
                    "cost_usd": _mean_of(task, "cost_usd"),
                    "seconds": _mean_of(task, "seconds"),
                    "reasons": [r for t in task.get("trials", []) for r in t.get("reasons", [])],
                }
        row["cost_delta_usd"] = _delta(_mean_of(b, "cost_usd"), _mean_of(a, "cost_usd"))
        row["seconds_delta"] = _delta(_mean_of(b, "seconds"), _mean_of(a, "seconds"))
        shown_b, shown_a = _pick(b, failing=False), _pick(a, failing=True)
        row["trials_compared"] = [shown_b, shown_a]
        calls = diff_actions(
            baseline.tool_calls(task_id, shown_b) if shown_b else [],
            candidate.tool_calls(task_id, shown_a) if shown_a else [],
        )
        row["actions"] = {"added": calls.added, "missing": calls.missing, "changed": calls.changed}
        tasks.append(row)
    ks = set(baseline.results.get("pass_hat_k", {})) | set(candidate.results.get("pass_hat_k", {}))
    pass_hat = {}
    for k in sorted(ks, key=int):
        pb = baseline.results.get("pass_hat_k", {}).get(k)
        pa = candidate.results.get("pass_hat_k", {}).get(k)
        pass_hat[k] = {"baseline": pb, "candidate": pa, "delta": _delta(pb, pa)}
    return {
        "baseline": _about(baseline),
        "candidate": _about(candidate),
        "pass_hat_k": pass_hat,
        "totals": _totals(baseline, candidate),
        "regressions": [t["id"] for t in tasks if t["status"] == "regressed"],
        "improvements": [t["id"] for t in tasks if t["status"] == "improved"],
        "tasks": tasks,
    }


def _about(run: Run) -> Json:
    keys = ("agent_model", "customer_model", "tasks_file", "trials", "started_at", "seconds")
    return {"folder": str(run.folder), **{k: run.results.get(k) for k in keys}}


def _totals(baseline: Run, candidate: Run) -> Json:
    def total(run: Run, key: str) -> float | None:
        values = [t.get(key) for task in run.results["tasks"] for t in task.get("trials", [])]
        return None if any(v is None for v in values) else round(sum(values), 6)

    out: Json = {}
    for key in ("cost_usd", "seconds"):
        b, a = total(baseline, key), total(candidate, key)
        out[key] = {"baseline": b, "candidate": a, "delta": _delta(b, a)}
    return out


# -- writing ----------------------------------------------------------------------------------


def write(result: Json, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "compare.md", out_dir / "compare.json"
    js.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md.write_text(markdown(result), encoding="utf-8")
    return md, js


def _num(value: float | None, fmt: str = ".3f", sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return format(value, ("+" if sign else "") + fmt)


def _money(value: float | None, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    prefix = ("-" if value < 0 else "+" if sign else "") if value or sign else ""
    return f"{prefix}${abs(value):.4f}"


def _call(call: Mapping[str, Any]) -> str:
    write = " (write)" if call["name"] in WRITE_TOOL_NAMES else ""
    args = json.dumps(call.get("args") or {}, ensure_ascii=False, sort_keys=True)
    return f"`{call['name']}`{write} {args}"


def summary(result: Json) -> str:
    """A few lines for the terminal."""
    lines = []
    for k, p in result["pass_hat_k"].items():
        lines.append(
            f"pass^{k}: {_num(p['baseline'])} -> {_num(p['candidate'])}"
            f" ({_num(p['delta'], sign=True)})"
        )
    regressions, improvements = result["regressions"], result["improvements"]
    lines.append(
        f"{len(regressions)} regression(s){': ' + ', '.join(regressions) if regressions else ''};"
        f" {len(improvements)} improvement(s)"
        f"{': ' + ', '.join(improvements) if improvements else ''}"
    )
    cost, secs = result["totals"]["cost_usd"], result["totals"]["seconds"]
    lines.append(
        f"cost {_money(cost['baseline'])} -> {_money(cost['candidate'])};"
        f" time {_num(secs['baseline'], '.1f')} s -> {_num(secs['candidate'], '.1f')} s"
    )
    return "\n".join(lines)


def markdown(result: Json) -> str:
    b, c = result["baseline"], result["candidate"]
    lines = [
        "# Eval comparison",
        "",
        f"- baseline: `{b['folder']}` (agent {b['agent_model']}, {b['trials']} trial(s),"
        f" started {b['started_at']})",
        f"- candidate: `{c['folder']}` (agent {c['agent_model']}, {c['trials']} trial(s),"
        f" started {c['started_at']})",
        "",
        "| k | baseline | candidate | delta |",
        "|---|---|---|---|",
    ]
    for k, p in result["pass_hat_k"].items():
        lines.append(
            f"| {k} | {_num(p['baseline'])} | {_num(p['candidate'])}"
            f" | {_num(p['delta'], sign=True)} |"
        )
    cost, secs = result["totals"]["cost_usd"], result["totals"]["seconds"]
    lines += [
        "",
        f"- cost: {_money(cost['baseline'])} -> {_money(cost['candidate'])}"
        f" ({_money(cost['delta'], sign=True)})",
        f"- time in conversations: {_num(secs['baseline'], '.1f')} s ->"
        f" {_num(secs['candidate'], '.1f')} s ({_num(secs['delta'], '.1f', sign=True)} s)",
        f"- regressions: {', '.join(result['regressions']) or 'none'}",
        f"- improvements: {', '.join(result['improvements']) or 'none'}",
        "",
        "## Per task",
        "",
        "| task | status | rewards before | rewards after | cost delta | time delta s |",
        "|---|---|---|---|---|---|",
    ]
    for t in result["tasks"]:
        before = " ".join(f"{r:.0f}" for r in (t["baseline"] or {}).get("rewards", []))
        after = " ".join(f"{r:.0f}" for r in (t["candidate"] or {}).get("rewards", []))
        lines.append(
            f"| {t['id']} | {t['status']} | {before or '-'} | {after or '-'}"
            f" | {_money(t['cost_delta_usd'], sign=True)}"
            f" | {_num(t['seconds_delta'], '.1f', sign=True)} |"
        )
    lines += ["", "## What differs", ""]
    shown = [t for t in result["tasks"] if t["status"] != "same" or any(t["actions"].values())]
    if not shown:
        lines.append("Nothing: every task scored the same with the same tool calls.")
    for t in shown:
        lines += _task_section(t)
    return "\n".join(lines) + "\n"


def _task_section(t: Json) -> list[str]:
    shown_b, shown_a = t["trials_compared"]
    lines = [f"### {t['id']}: {t['status']}", ""]
    actions = t["actions"]
    if any(actions.values()):
        lines.append(f"Tool calls, baseline trial {shown_b} vs candidate trial {shown_a}:")
        lines += [f"- added: {_call(c)}" for c in actions["added"]]
        lines += [f"- missing: {_call(c)}" for c in actions["missing"]]
        for c in actions["changed"]:
            parts = "; ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in c["differs"].items())
            lines.append(f"- different arguments: `{c['name']}` {parts}")
    else:
        lines.append("Same tool calls.")
    reasons = (t["candidate"] or {}).get("reasons") or []
    if reasons:
        lines += ["", "Why the candidate scored 0:"]
        lines += [f"- {r}" for r in reasons]
    lines.append("")
    return lines
