"""No import cycle in the app: not between two modules, not between two packages, and not
under `if TYPE_CHECKING:` either (a cycle a type checker needs is a cycle a reader follows).

The layers (test_layers.py) allow imports within a layer, so two packages of one layer, or
two modules of one package, could still import each other; this walks the same imports
(function-level and TYPE_CHECKING ones included) and names every cycle it finds.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

import pytest

from tests.unit.test_layers import app_modules, imported_modules, module_name, top_level

# module name -> (source, is it a package's __init__)
Sources = Mapping[str, tuple[str, bool]]


def app_sources() -> dict[str, tuple[str, bool]]:
    return {
        module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
        for p in app_modules()
    }


def named_modules(source: str, module: str, is_package: bool) -> set[str]:
    """The modules a module's imports name, relative ones resolved, at any depth:
    `from app.runs import leases` names `app.runs.leases` (the package's `__init__` runs
    first for any of its modules, so it is no edge of its own); `from app.runs.leases
    import ThreadLeases` names `app.runs.leases`."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets = [t for _, t in imported_modules(ast.Module([node], []), module, is_package)]
        if isinstance(node, ast.Import):
            names |= set(targets)
        else:
            names |= {f"{targets[0]}.{alias.name}" for alias in node.names}
    return names


def _resolve(name: str, known: set[str]) -> str | None:
    """The app module a name falls in: the longest prefix that is one."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in known:
            return prefix
    return None


def module_edges(sources: Sources) -> dict[str, set[str]]:
    """Each module's imports of other app modules (a name that is no module stands for
    the module it is defined in: the longest prefix that is one)."""
    known = set(sources)
    edges: dict[str, set[str]] = {m: set() for m in sources}
    for module, (source, is_package) in sources.items():
        for name in named_modules(source, module, is_package):
            found = _resolve(name, known) if name.split(".")[0] == "app" else None
            if found is not None and found != module:
                edges[module].add(found)
    return edges


def package_edges(edges: Mapping[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in edges.items():
        own = top_level(module)
        out.setdefault(own, set())
        for target in targets:
            other = top_level(target)
            if other != own and other != "app":  # `app/__init__` is the root, not a package
                out[own].add(other)
    return out


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


class TestNoImportCycle:
    def test_no_two_modules_of_the_app_import_each_other(self) -> None:
        assert cycles(module_edges(app_sources())) == []

    def test_no_two_packages_of_the_app_import_each_other(self) -> None:
        assert cycles(package_edges(module_edges(app_sources()))) == []


def _sources(**modules: str) -> dict[str, tuple[str, bool]]:
    return {name.replace("__", "."): (source, False) for name, source in modules.items()}


class TestTheCycleChecker:
    """The checker finds a cycle that is planted, also one only a type checker sees."""

    @pytest.mark.parametrize(
        "sources",
        [
            _sources(
                app__agent__edits="from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from app.agent.graph import Graph\n",
                app__agent__graph="from app.agent.nodes import CoreNodes\n",
                app__agent__nodes="from app.agent.edits import cut_answer\n",
            ),
            _sources(
                app__runs__leases="from app.runs import service\n",
                app__runs__service="def later():\n    from .leases import ThreadLeases\n",
            ),
        ],
    )
    def test_finds_a_module_cycle(self, sources: dict[str, tuple[str, bool]]) -> None:
        assert len(cycles(module_edges(sources))) == 1

    def test_finds_a_package_cycle_between_modules_that_do_not_form_one(self) -> None:
        sources = _sources(
            app__runs__retention="from app.analytics.sweep import outcome_keeper\n",
            app__analytics__sweep="x = 1\n",
            app__analytics__sweeper="from app.runs.periodic import Loop\n",
            app__runs__periodic="x = 1\n",
        )
        edges = module_edges(sources)
        assert cycles(edges) == []
        assert cycles(package_edges(edges)) == [["analytics", "runs"]]

    def test_an_import_one_way_is_no_cycle(self) -> None:
        sources = _sources(
            app__threads__control="from app.runs.surgery import store_messages\n",
            app__runs__surgery="from app.agent.graph import STAFF_NODE\n",
            app__agent__graph="from app.agent.nodes import CoreNodes\n",
            app__agent__nodes="from app.agent.edits import cut_answer\n",
            app__agent__edits="from app.agent.state import fresh_turn_fields\n",
            app__agent__state="x = 1\n",
        )
        edges = module_edges(sources)
        assert cycles(edges) == []
        assert cycles(package_edges(edges)) == []
