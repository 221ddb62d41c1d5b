"""The app's packages form layers, and imports only run downward (or within a layer).

A newcomer should find the one place for any change, and a change low down should never
have to know what sits on top of it: the tools serve any agent, the agent any run service,
the runs any API. This walks every module of app/ and names each import that breaks that.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import app

APP_DIR = Path(app.__file__).parent

# Lowest first. A module may import its own layer and those below it.
LAYERS: tuple[frozenset[str], ...] = (
    # who is acting; settings; errors; small plumbing
    frozenset(
        {"app", "identity", "config", "errors", "jsonbytes", "fencing", "logging", "metrics"}
        | {"gc_tuning", "jsontext", "tracing", "background", "retry", "turn"}
    ),
    frozenset({"domain"}),  # business rules: see also ISOLATED
    # leaf services on their own tables (or none): help centre, preferences, codes and the
    # outbox, the offline demo model, policy versions (their gate and commands sit on top)
    frozenset({"help", "memory", "notify", "demo", "policies"}),
    frozenset({"db"}),  # pool, checkpointer, repositories, the write executor, erase
    frozenset({"tools"}),
    frozenset({"agent", "actions"}),  # actions: remote tools, their ledger and sources
    frozenset({"runs", "analytics"}),  # analytics: outcomes read what runs recorded
    # a thread beyond one run: who answers it (control, takeover), its stream, its state
    # (inspector, archive), its ids and retention; over the runs' leases and repository
    frozenset({"threads"}),
    frozenset({"channels"}),  # Chatwoot and email: adapters over the runs and control
    frozenset({"api"}),
    frozenset({"main", "lifespan", "cli", "__main__", "eval", "cli_policies", "cli_db", "serving"}),
)
# Packages that import nothing of the app at all.
ISOLATED = frozenset({"identity", "domain"})
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.imported}: {self.why}"


def top_level(module: str) -> str:
    """`app.runs.service` -> `runs`; `app` -> `app`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(APP_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every module an import statement names, relative imports resolved, at any depth
    (function-level and TYPE_CHECKING imports are dependencies too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
    return found


def violations_in(
    source: str, module: str, *, path: str = "", is_package: bool = False
) -> list[Violation]:
    own = top_level(module)
    out: list[Violation] = []
    for line, target in imported_modules(ast.parse(source), module, is_package):
        root = target.split(".")[0]
        if root in ("tests", "benchmarks"):
            out.append(Violation(path, line, target, "the product never imports test code"))
            continue
        if root != "app":
            continue
        other = top_level(target)
        if other == own:
            continue
        if own in ISOLATED:
            out.append(Violation(path, line, target, f"{own} imports nothing of the app"))
        elif other not in RANK:
            out.append(Violation(path, line, target, f"{other} has no layer in LAYERS"))
        elif RANK[other] > RANK[own]:
            out.append(Violation(path, line, target, f"{other} is a layer above {own}"))
    return out


def app_modules() -> list[Path]:
    return sorted(p for p in APP_DIR.rglob("*.py") if "__pycache__" not in p.parts)


class TestLayers:
    def test_every_package_and_module_of_the_app_has_a_layer(self) -> None:
        names = {p.stem for p in APP_DIR.glob("*.py")} | {
            p.name for p in APP_DIR.iterdir() if (p / "__init__.py").exists()
        }
        names = {"app" if n == "__init__" else n for n in names}
        assert sorted(names - RANK.keys()) == []

    def test_nothing_imports_upward(self) -> None:
        found: list[Violation] = []
        for path in app_modules():
            found += violations_in(
                path.read_text(encoding="utf-8"),
                module_name(path),
                path=str(path.relative_to(APP_DIR.parent)),
                is_package=path.name == "__init__.py",
            )
        assert [str(v) for v in found] == []


class TestTheChecker:
    """The rules above hold only if the checker can see a broken one."""

    @pytest.mark.parametrize(
        ("module", "source"),
        [
            ("app.tools.scope", "from app.agent.graph import build_graph"),
            ("app.runs.service", "from app.api.auth import Principal"),
            ("app.agent.nodes", "import app.runs.service"),
            ("app.agent.nodes", "def later():\n    from app.api.deps import ThreadId\n"),
            ("app.domain.orders", "from app.config import Settings"),
            ("app.identity", "from app.errors import AppError"),
            ("app.demo.model", "from tests.fakellm import Reply"),
            ("app.db.pool", "from ..tools import registry"),
        ],
    )
    def test_finds_an_import_that_breaks_the_layers(self, module: str, source: str) -> None:
        assert len(violations_in(source, module)) == 1

    @pytest.mark.parametrize(
        ("module", "source"),
        [
            ("app.api.deps", "from app.threads.ids import thread_id"),
            ("app.tools.scope", "from app.identity import AgentContext"),
            ("app.runs.service", "from . import stream\nfrom .events import TurnRecorder"),
            ("app.domain.orders", "from app.domain.errors import RuleViolation"),
            ("app.lifespan", "from app.demo.model import DemoChatModel"),
        ],
    )
    def test_allows_an_import_within_or_below_its_layer(self, module: str, source: str) -> None:
        assert violations_in(source, module) == []
