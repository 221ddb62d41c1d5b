"""A run's state is one object, the turn (app/turn.py): its lease, control, token sink, held
checkpoint rows and prefetched checkpoint, found through one ContextVar by what LangGraph
calls. A second ContextVar for a piece of it would bring back state that travels apart."""

from __future__ import annotations

import ast
from dataclasses import fields

from app.db.checkpointer import prefetched
from app.fencing import Lease, RunControl
from app.turn import Turn, current_lease, current_turn, writing
from tests.unit.test_layers import APP_DIR, app_modules

# Every ContextVar of the app, and why it is not a field of the turn.
ALLOWED = {
    ("app/turn.py", "current_turn"): "the run's state itself",
    ("app/tracing.py", "_run_ids"): "the spans' run, set for any task by tracing.in_run",
    ("app/tracing.py", "_call_started"): "one model call's start, for its time to first token",
    ("app/actions/mcp_source.py", "_current"): "one remote call's token, for its transport",
    ("app/db/before_images.py", "_collecting"): "one write transaction's before-image",
}


def context_vars(source: str) -> list[str]:
    """The names every `ContextVar(...)` of `source` is assigned to ("?" when none)."""
    tree = ast.parse(source)
    named: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            named[id(node.value)] = target.id if isinstance(target, ast.Name) else "?"
    return [
        named.get(id(node), "?")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _names_context_var(node.func)
    ]


def _names_context_var(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "ContextVar"
    return isinstance(func, ast.Attribute) and func.attr == "ContextVar"


class TestOneTurn:
    def test_the_only_context_vars_are_the_turn_and_the_listed_ones(self) -> None:
        found = {
            (str(path.relative_to(APP_DIR.parent)), name)
            for path in app_modules()
            for name in context_vars(path.read_text(encoding="utf-8"))
        }
        assert sorted(found - ALLOWED.keys()) == []
        assert sorted(ALLOWED.keys() - found) == []  # the list follows the code

    def test_the_scan_sees_a_context_var_however_it_is_written(self) -> None:
        source = (
            "import contextvars\n"
            "from contextvars import ContextVar\n"
            "current_lease: ContextVar[int | None] = ContextVar('lease', default=None)\n"
            "_held = contextvars.ContextVar('held')\n"
            "def later():\n    return ContextVar('tokens')\n"
        )
        assert context_vars(source) == ["current_lease", "_held", "?"]

    def test_the_turn_holds_the_five_pieces_of_a_run(self) -> None:
        names = {f.name for f in fields(Turn)}
        assert names == {"lease", "control", "tokens", "held", "prefetched"}


class TestFindingTheTurn:
    def test_outside_a_run_nothing_is_fenced_and_a_write_waits_for_nothing(self) -> None:
        assert current_turn.get() is None and current_lease() is None
        with writing():
            pass

    def test_a_write_of_the_current_run_is_one_its_cancel_waits_for(self) -> None:
        control = RunControl()
        lease = Lease("thread", 3, "run", 1000)
        with Turn(lease=lease, control=control).current():
            assert current_lease() == lease
            with writing():
                assert control.writing == 1
        assert control.writing == 0 and current_turn.get() is None

    def test_the_prefetched_checkpoint_rides_on_the_turn_for_the_block(self) -> None:
        turn = Turn()
        with turn.current():
            with prefetched("thread", None, turn):
                assert turn.prefetched is not None and turn.prefetched.row is None
            assert turn.prefetched is None
            with prefetched("thread", {"checkpoint": {}}):  # the current turn by default
                assert turn.prefetched is not None and turn.prefetched.row == {"checkpoint": {}}
        with prefetched("thread", None):  # outside a run: a turn of its own, for the block
            inner = current_turn.get()
            assert inner is not None and inner.prefetched is not None
        assert current_turn.get() is None
