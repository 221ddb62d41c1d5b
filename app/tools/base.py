"""Turning an async function into a LangChain tool that never raises."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ValidationError

log = structlog.get_logger(__name__)

TOOL_FAILED = "Error: the request could not be completed; nothing was changed. Try again later."


def make_tool(name: str, fn: Callable[..., Awaitable[Any]]) -> BaseTool:
    """The tool `name`: schema from `fn`'s signature, description from its docstring.

    `runtime: ToolRuntime` is injected by LangGraph and left out of the model's schema.
    """
    return StructuredTool.from_function(
        coroutine=_never_raises(name, fn),
        name=name,
        description=_description(inspect.getdoc(fn) or name),
        handle_validation_error=invalid_arguments,
    )


def _description(doc: str) -> str:
    """Paragraphs of the docstring, each on one line."""
    paragraphs = doc.split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def invalid_arguments(error: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
        for e in error.errors()
        if e["loc"][:1] != ("runtime",)
    ]
    detail = "; ".join(problems[:5]) or "the arguments do not match the schema"
    return f"Error: invalid arguments ({detail}). Check the tool's argument schema and retry."


def _never_raises(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except Exception:
            log.exception("tool failed", tool=name)
            return TOOL_FAILED

    return guarded
