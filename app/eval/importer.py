"""Read tau-bench's retail task files into our task JSON.

The files are Python (`TASKS_TEST = [Task(annotator=..., user_id=..., actions=[Action(name=...,
kwargs={...})], ...)]`; older ones hold plain dicts). They are parsed with `ast` and read as
literals: nothing in them is imported or executed.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from app.eval.tasks import Task, TaskFileError, parse_task

SPLITS = ("test", "train", "dev")
RETAIL_DIR = Path("tau_bench") / "envs" / "retail"
CONSTRUCTORS = frozenset({"Task", "Action"})


def retail_dir(checkout: str | Path) -> Path:
    """The retail folder of a tau-bench checkout (or the folder itself)."""
    root = Path(checkout)
    for candidate in (root / RETAIL_DIR, root):
        if any((candidate / f"tasks_{s}.py").is_file() for s in SPLITS):
            return candidate
    raise TaskFileError(f"{checkout}: no {RETAIL_DIR}/tasks_test.py (is it a tau-bench checkout?)")


def import_checkout(checkout: str | Path, split: str = "test") -> list[Task]:
    """The tasks of one split ("test", "train", "dev") or of all of them ("all")."""
    folder = retail_dir(checkout)
    splits = SPLITS if split == "all" else (split,)
    tasks: list[Task] = []
    for name in splits:
        path = folder / f"tasks_{name}.py"
        if split == "all" and not path.is_file():
            continue
        tasks += read_task_file(path, prefix=name)
    return tasks


def read_task_file(path: str | Path, *, prefix: str | None = None) -> list[Task]:
    file = Path(path)
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except FileNotFoundError:
        raise TaskFileError(f"{file}: file not found") from None
    except SyntaxError as e:
        raise TaskFileError(f"{file}: not valid Python (line {e.lineno})") from None
    raw = [item for node in _task_lists(tree) for item in _literal(node, file)]
    label = prefix or file.stem
    tasks = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise TaskFileError(f"{file}: task {index} is not a Task(...) or a dict")
        item = {k: v for k, v in item.items() if k in ("annotator", "user_id", "instruction")} | {
            "id": f"{label}-{index}",
            "actions": item.get("actions", []),
            "outputs": [str(o) for o in item.get("outputs") or []],
        }
        tasks.append(parse_task(item, index, str(file)))
    return tasks


def _task_lists(tree: ast.Module) -> list[ast.expr]:
    """Top-level `NAME = [...]` assignments whose elements look like tasks."""
    found: list[ast.expr] = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.List) and value.elts and all(map(_looks_like_task, value.elts)):
            found.append(value)
    return found


def _looks_like_task(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        return _callee(node) == "Task"
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "user_id" for k in node.keys)
    return False


def _callee(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _literal(node: ast.expr, file: Path) -> Any:
    """A literal value, where `Task(...)` and `Action(...)` read as dicts of their keywords."""
    if isinstance(node, ast.Call) and _callee(node) in CONSTRUCTORS:
        if node.args or any(k.arg is None for k in node.keywords):
            raise TaskFileError(f"{file}:{node.lineno}: only keyword arguments are read")
        return {k.arg: _literal(k.value, file) for k in node.keywords}
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, file) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise TaskFileError(f"{file}:{node.lineno}: '**' in a dict is not a literal")
        pairs = zip(node.keys, node.values, strict=True)
        return {_literal(k, file): _literal(v, file) for k, v in pairs if k is not None}
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise TaskFileError(f"{file}:{node.lineno}: not a literal value") from None
