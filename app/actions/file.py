"""The actions file (`ACTIONS_FILE`): which MCP servers and OpenAPI operations the agent may
use, read and checked once at start. Every mistake is reported with the line it is on, so
a start that fails says where to look (`ActionsFileError`).

    sources:
      - name: loyalty
        mcp: http://127.0.0.1:9001/mcp
        headers: {Authorization: "Bearer ${LOYALTY_TOKEN}"}
        tools:
          issue_voucher: {kind: write, idempotent: true, confirm: "Issue {amount}"}

`${VAR}` in any value is read from the environment; an unset one is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

SOURCE_NAME = r"^[a-z0-9_]+$"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
Path_ = tuple[str | int, ...]


class ActionsFileError(ValueError):
    """The file cannot be used; the message names the file and the line."""


class ToolSettings(BaseModel):
    """Per-tool settings; a tool the file does not list gets the defaults."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["read", "write"] | None = None  # None: from the server's hints
    idempotent: bool | None = None  # None: MCP's idempotentHint, false for HTTP
    confirm: str | None = Field(default=None, max_length=300)  # "{argument}" names an argument
    label: str | None = Field(default=None, max_length=100)  # what the page says while it runs


class SourceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SOURCE_NAME, max_length=40)
    mcp: str | None = None  # an MCP server over streamable HTTP
    openapi: str | None = None  # an OpenAPI 3 document: a URL or a file
    base_url: str | None = None  # OpenAPI: where the operations are sent (else the doc's)
    operations: list[str] | None = None  # OpenAPI: the operationIds offered as tools
    headers: dict[str, str] = Field(default_factory=dict)
    identity_secret: SecretStr | None = None
    customer_argument: str | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    tools: dict[str, ToolSettings] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> SourceSettings:
        if (self.mcp is None) == (self.openapi is None):
            raise ValueError("a source has exactly one of `mcp` or `openapi`")
        if self.openapi is not None and not self.operations:
            raise ValueError("an `openapi` source lists its `operations` (operationIds)")
        if self.mcp is not None and (self.operations or self.base_url):
            raise ValueError("`operations` and `base_url` belong to an `openapi` source")
        if self.identity_secret is not None and len(self.identity_secret.get_secret_value()) < 32:
            raise ValueError("identity_secret must be at least 32 characters (HS256)")
        return self

    @property
    def kind(self) -> Literal["mcp", "openapi"]:
        return "mcp" if self.mcp is not None else "openapi"


class ActionsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sources: list[SourceSettings] = Field(default_factory=list)


def load_actions_file(path: str | Path, environ: Mapping[str, str] | None = None) -> ActionsFile:
    """The file, checked: raises ActionsFileError naming the line of the first mistake."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ActionsFileError(f"{where}: cannot be read ({error.strerror})") from None
    return parse_actions(text, where, os.environ if environ is None else environ)


def parse_actions(text: str, where: str, environ: Mapping[str, str]) -> ActionsFile:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise ActionsFileError(f"{where}{line}: {problem}") from None
    if node is None:
        return ActionsFile()
    lines: dict[Path_, int] = {}
    value = _Plain(lines, where, environ).of(node, ())
    try:
        parsed = ActionsFile.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        loc = tuple(first["loc"])
        raise ActionsFileError(
            f"{where} line {_line_of(loc, lines)}: {_dotted(loc) or 'the file'}: {first['msg']}"
        ) from None
    seen: dict[str, int] = {}
    for i, source in enumerate(parsed.sources):
        if source.name in seen:
            at = _line_of(("sources", i, "name"), lines)
            raise ActionsFileError(f"{where} line {at}: source name {source.name!r} is used twice")
        seen[source.name] = i
    return parsed


class _Plain:
    """The node tree as plain values (strings with `${VAR}` filled in), noting each one's
    line."""

    def __init__(self, lines: dict[Path_, int], where: str, environ: Mapping[str, str]) -> None:
        self.lines, self.where, self.environ = lines, where, environ
        self.scalars = yaml.SafeLoader("")  # builds a scalar of its resolved tag

    def of(self, node: yaml.Node, path: Path_) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                if key in out:
                    line = key_node.start_mark.line + 1
                    raise ActionsFileError(f"{self.where} line {line}: {key!r} is given twice")
                out[key] = self.of(value_node, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.of(item, (*path, i)) for i, item in enumerate(node.value)]
        value = self.scalars.construct_object(node)
        if isinstance(value, str):
            return _expand(value, self.environ, f"{self.where} line {self.lines[path]}")
        return value


def _expand(value: str, environ: Mapping[str, str], where: str) -> str:
    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ActionsFileError(f"{where}: environment variable {name} is not set")
        return environ[name]

    return _VARIABLE.sub(variable, value)


def _line_of(loc: Path_, lines: Mapping[Path_, int]) -> int:
    """The line of the deepest part of `loc` the file has (a missing key: its parent's)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _dotted(loc: Path_) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
