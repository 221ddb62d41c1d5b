"""Evaluation tasks in tau-bench's shape: who the customer is, what they want, and what a
correct agent does (`actions`) and says (`outputs`).

A task file is a JSON list of objects with `user_id`, `instruction`, `actions` (each a
`name` and its `kwargs`) and `outputs`. Optional: `id`, `annotator`, and `customer_lines`,
the lines the offline scripted customer says in order (a model customer never sees them).

A recorded task (`cs-agent eval record`, app/eval/record.py) also carries `data`, the
records its conversation started from in tau-bench's layout (`users`, `orders`,
`products`), so it replays on no other shop, and `expected`: how the conversation ended
(`result`, `handoff`, the writes the customer `declined`) and the touched `records` as its
writes left them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

REQUIRED = ("user_id", "instruction", "actions", "outputs")
OPTIONAL = ("id", "annotator", "customer_lines", "data", "expected")


class TaskFileError(ValueError):
    """A task file that cannot be read; the message names the task and the field."""


@dataclass(frozen=True)
class Action:
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": self.kwargs}


@dataclass(frozen=True)
class Task:
    id: str
    user_id: str
    instruction: str
    actions: tuple[Action, ...]
    outputs: tuple[str, ...]
    annotator: str | None = None
    customer_lines: tuple[str, ...] = ()
    # A recorded task's: the records it started from, and how it ended (result, handoff,
    # declined writes, the touched records after).
    data: dict[str, Any] | None = field(default=None, hash=False)
    expected: dict[str, Any] | None = field(default=None, hash=False)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.annotator is not None:
            out["annotator"] = self.annotator
        out |= {
            "user_id": self.user_id,
            "instruction": self.instruction,
            "actions": [a.as_json() for a in self.actions],
            "outputs": list(self.outputs),
        }
        if self.customer_lines:
            out["customer_lines"] = list(self.customer_lines)
        if self.expected is not None:
            out["expected"] = self.expected
        if self.data is not None:
            out["data"] = self.data
        return out


def shipped_tasks_path() -> Path:
    """The repo's own task set, written on the deterministic seed shop (app/db/seed.py)."""
    return Path(str(resources.files("app.eval") / "tasks" / "seed_tasks.json"))


def load_tasks(path: str | Path) -> list[Task]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskFileError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise TaskFileError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(raw, list):
        raise TaskFileError(f"{path}: expected a JSON list of tasks")
    tasks = [parse_task(item, index, str(path)) for index, item in enumerate(raw)]
    ids = [t.id for t in tasks]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate is not None:
        raise TaskFileError(f"{path}: task id {duplicate!r} is used twice")
    return tasks


def dump_tasks(tasks: list[Task], path: str | Path) -> None:
    text = json.dumps([t.as_json() for t in tasks], indent=2, ensure_ascii=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def parse_task(item: object, index: int, source: str = "tasks") -> Task:
    where = f"{source}[{index}]"
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: expected an object")
    missing = [k for k in REQUIRED if k not in item]
    if missing:
        raise TaskFileError(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(set(item) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise TaskFileError(f"{where}: unknown field {', '.join(unknown)}")
    user_id, instruction = item["user_id"], item["instruction"]
    if not isinstance(user_id, str) or not user_id:
        raise TaskFileError(f"{where}: user_id must be a non-empty string")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFileError(f"{where}: instruction must be a non-empty string")
    return Task(
        id=str(item.get("id", index)),
        user_id=user_id,
        instruction=instruction,
        actions=_actions(item["actions"], f"{where}.actions"),
        outputs=_strings(item["outputs"], f"{where}.outputs"),
        annotator=None if item.get("annotator") is None else str(item["annotator"]),
        customer_lines=_strings(item.get("customer_lines", []), f"{where}.customer_lines"),
        data=_object(item.get("data"), f"{where}.data", ("users", "orders", "products")),
        expected=_object(item.get("expected"), f"{where}.expected", ()),
    )


def _object(raw: object, where: str, parts: tuple[str, ...]) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TaskFileError(f"{where}: expected an object")
    for part in parts:
        if not isinstance(raw.get(part, {}), dict):
            raise TaskFileError(f"{where}.{part}: expected an object keyed by id")
    return raw


def _actions(raw: object, where: str) -> tuple[Action, ...]:
    if not isinstance(raw, list):
        raise TaskFileError(f"{where}: expected a list")
    return tuple(_action(a, f"{where}[{i}]") for i, a in enumerate(raw))


def _action(raw: object, where: str) -> Action:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise TaskFileError(f"{where}: expected {{'name': ..., 'kwargs': {{...}}}}")
    kwargs = raw.get("kwargs", raw.get("arguments", {}))  # older tau-bench files: arguments
    if not isinstance(kwargs, dict):
        raise TaskFileError(f"{where}: kwargs must be an object")
    return Action(name=raw["name"], kwargs=kwargs)


def _strings(raw: object, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise TaskFileError(f"{where}: expected a list of strings")
    return tuple(raw)
