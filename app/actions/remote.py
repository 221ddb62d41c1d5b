"""What both kinds of source give: the tools they offer, and how a call went.

A call ends in one of three ways, and the write path treats each differently:
`Answered` (the server said something: done), `NotSent` (nothing reached the server, so
nothing happened there: safe to try again later), `NoAnswer` (it may have reached the
server, and no result came back: the outcome is unknown).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.actions.file import SourceSettings, ToolSettings

Kind = Literal["read", "write"]
RESULT_LIMIT = 4000  # characters of a result the model reads
SERVER_TEXT_LIMIT = 300  # characters of a server's own error text the model may read
# Any arguments: the schema of a tool whose server could not be asked at start.
ANY_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}


@dataclass(frozen=True)
class HttpOperation:
    method: str
    path: str
    # argument -> where it goes: "path", "query", "header"; the rest go in the JSON body
    parameters: dict[str, str] = field(default_factory=dict)
    body: Literal["fields", "whole", "none"] = "none"  # "whole": the body is `body`


@dataclass(frozen=True)
class RemoteTool:
    source: str
    name: str
    description: str
    schema: dict[str, Any]  # the server's JSON Schema, less the customer argument
    kind: Kind
    idempotent: bool
    confirm: str | None = None
    label: str | None = None
    customer_argument: str | None = None
    http: HttpOperation | None = None  # an OpenAPI operation's request


@dataclass(frozen=True)
class Answered:
    ok: bool
    text: str  # for the model: the result, or the server's (capped) reason


class NotSent(Exception):
    """Nothing reached the server (it is down, or refused the connection)."""


class NoAnswer(Exception):
    """The request went out and no result came back (timeout, reset)."""


class Source(Protocol):
    settings: SourceSettings
    status: Literal["ok", "down"]

    async def open(self) -> None: ...

    def tools(self) -> list[RemoteTool]: ...

    async def check(self) -> bool: ...

    async def call(
        self, tool: RemoteTool, args: Mapping[str, Any], *, key: str | None, token: str | None
    ) -> Answered: ...

    async def close(self) -> None: ...


def settings_for(source: SourceSettings, name: str) -> ToolSettings:
    return source.tools.get(name) or ToolSettings()


def without_argument(schema: Mapping[str, Any], argument: str | None) -> dict[str, Any]:
    """The schema the model sees: the customer argument is the server's to fill."""
    out = copy.deepcopy(dict(schema))
    if argument is None:
        return out
    props = out.get("properties")
    if isinstance(props, dict):
        props.pop(argument, None)
    required = out.get("required")
    if isinstance(required, list):
        out["required"] = [r for r in required if r != argument]
    return out


def capped(text: str, limit: int = RESULT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + " …(cut)"


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def placeholder(source: SourceSettings, name: str) -> RemoteTool:
    """A tool the file names whose server did not answer at start: offered with any
    arguments, failing with a fixed observation until the server answers."""
    chosen = settings_for(source, name)
    return RemoteTool(
        source=source.name,
        name=name,
        description=f"{name} (from {source.name})",
        schema=dict(ANY_ARGUMENTS),
        kind=chosen.kind or "write",  # unknown: treated as the careful kind
        idempotent=bool(chosen.idempotent),
        confirm=chosen.confirm,
        label=chosen.label,
        customer_argument=source.customer_argument,
    )
