"""Every tool's spec, the tools built from them around one pool, and what the graph needs to
confirm and repair writes. A tool is declared once, in its area's module (`TOOLS`); an area
module is listed once, in `AREAS`. The model sees the reads, then the writes, each in the
order of `AREAS`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.db.erase import KEPT_ARGUMENTS
from app.db.writes import recorded_outcome
from app.notify.codes import IdentityCodes, default_identity_codes
from app.tools import (
    delivered,
    handoff,
    help,
    identity,
    memory,
    orders,
    products,
    profile,
    shipping,
)
from app.tools.results import Assessment, ObservationFormat
from app.tools.spec import ToolDeps, ToolSpec
from app.tools.summaries import assess, summarize

__all__ = [
    "CONVERSATION_TOOLS",
    "RECORDED_ARGUMENTS",
    "SPECS",
    "WRITE_TOOL_NAMES",
    "PostgresWriteLedger",
    "ToolSet",
    "build_tools",
    "page_labels",
    "summarize_write",
]

AREAS = (identity, orders, products, shipping, help, memory, delivered, profile, handoff)
SPECS: dict[str, ToolSpec] = {
    s.name: s
    for access in ("read", "write")
    for area in AREAS
    for s in area.TOOLS
    if s.access == access
}
WRITE_TOOL_NAMES: frozenset[str] = frozenset(
    name for name, spec in SPECS.items() if spec.access == "write"
)
# The write arguments a record keeps when its thread or customer is erased: ids, codes and
# amounts; the ones marked PERSONAL (an address, a hand-over summary) are dropped.
RECORDED_ARGUMENTS: frozenset[str] = frozenset(
    argument
    for name in WRITE_TOOL_NAMES
    for argument, personal in SPECS[name].arguments().items()
    if not personal
)
# The conversation's own tools: who the customer is, the hand-over, their preferences, the
# help centre. They act on the conversation, not on the shop, so BUILTIN_TOOLS=false keeps
# them (and `cs-agent mcp serve-shop` serves the others).
CONVERSATION_TOOLS: frozenset[str] = frozenset(
    {
        "find_user_id_by_email",
        "find_user_id_by_name_zip",
        "confirm_identity",
        "transfer_to_human_agents",
        "remember_preference",
        "search_help_center",
        "get_help_article",
    }
)
if not SPECS.keys() >= CONVERSATION_TOOLS:
    raise RuntimeError("CONVERSATION_TOOLS names a tool with no spec")
if len(SPECS) != sum(len(area.TOOLS) for area in AREAS):
    raise RuntimeError("two tools share a name")
if RECORDED_ARGUMENTS != KEPT_ARGUMENTS:
    raise RuntimeError(
        "app/db/erase.py KEPT_ARGUMENTS must be the write arguments not marked PERSONAL: "
        + ", ".join(sorted(RECORDED_ARGUMENTS ^ KEPT_ARGUMENTS))
    )


@dataclass(frozen=True)
class ToolSet:
    read: list[BaseTool]
    write: list[BaseTool]

    @property
    def all(self) -> list[BaseTool]:
        return [*self.read, *self.write]

    def names(self) -> list[str]:
        return [t.name for t in self.all]


def build_tools(
    pool: AsyncConnectionPool[Any],
    identity_codes: IdentityCodes | None = None,
    *,
    builtin: bool = True,
) -> ToolSet:
    """`identity_codes` sends guests their one-time codes; the lifespan passes the configured
    one, and without it codes only reach the outbox and the log. `builtin=False`
    (BUILTIN_TOOLS=false): only the conversation's own tools, for a service whose shop
    tools come from its actions file."""
    deps = ToolDeps(pool=pool, codes=identity_codes or default_identity_codes(pool))
    tools = {
        name: spec.tool(deps)
        for name, spec in SPECS.items()
        if builtin or name in CONVERSATION_TOOLS
    }
    return ToolSet(
        read=[t for name, t in tools.items() if name not in WRITE_TOOL_NAMES],
        write=[t for name, t in tools.items() if name in WRITE_TOOL_NAMES],
    )


async def summarize_write(
    pool: AsyncConnectionPool[Any], customer_id: str | None, name: str, args: Mapping[str, Any]
) -> str:
    """The confirmation card's line for a pending write (its spec's `Confirm`)."""
    spec = SPECS.get(name)
    return await summarize(pool, name, spec.confirm if spec else None, customer_id, args)


def page_labels() -> dict[str, dict[str, str]]:
    """What the page says while each tool runs, and after it when the result's own words
    are not for the customer (app/static/tool-labels.js)."""
    labels: dict[str, dict[str, str]] = {}
    for name, spec in SPECS.items():
        labels[name] = {"label": spec.label}
        if spec.label_fallback:
            labels[name]["fallback"] = spec.label_fallback
        if spec.done:
            labels[name]["done"] = spec.done
    return labels


def page_labels_module() -> str:
    """app/static/tool-labels.js, generated: `python -m app.tools.labels` writes it."""
    body = json.dumps(page_labels(), indent=2, ensure_ascii=False)
    return (
        "// Generated from the tool specs (app/tools/*.py) by `python -m app.tools.labels`;\n"
        "// do not edit. `{order}` reads 'order #W…', any other `{name}` the argument;\n"
        "// `done` is the line for a successful result whose own words are not for the customer.\n"
        f"export const TOOL_LABELS = {body};\n"
    )


@dataclass(frozen=True)
class PostgresWriteLedger:
    """The graph's `WriteLedger` port (app.agent.ports) over the tool tables."""

    pool: AsyncConnectionPool[Any]

    async def summarize(self, customer_id: str | None, name: str, args: dict[str, Any]) -> str:
        return await summarize_write(self.pool, customer_id, name, args)

    async def assess(self, customer_id: str | None, name: str, args: dict[str, Any]) -> Assessment:
        spec = SPECS.get(name)
        if spec is not None and not spec.asks:
            return Assessment(ask=False, summary="")
        line, problem = await assess(
            self.pool, name, spec.confirm if spec else None, customer_id, args
        )
        return Assessment(ask=True, summary=line, refusal=problem)

    async def recorded_result(
        self,
        idempotency_key: str,
        *,
        name: str,
        args: Mapping[str, Any],
        customer_id: str | None,
        observation_format: ObservationFormat,
    ) -> tuple[str, Any] | None:
        """The result a write with this key gave, rebuilt from its record by the tool's own
        spec: (content, artifact), or None when it never ran."""
        spec = SPECS.get(name)
        outcome = await recorded_outcome(self.pool, idempotency_key)
        if outcome is None or spec is None:
            return None
        return spec.observed(spec.outcome(outcome), args, customer_id, observation_format)
