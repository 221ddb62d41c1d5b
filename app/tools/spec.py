"""One declaration per tool: its function, read or write, its page label, whether its result
may be cached, and for a write the line the customer confirms.

    @read_tool(label="Looking up {order} …", cacheable=True)
    async def get_order_details(deps: ToolDeps, order_id: OrderId, runtime: Runtime) -> ...:
        \"\"\"The docstring is the description the model reads.\"\"\"

The registry, the graph's write list, the tool cache, the confirmation card and the page's
labels all read the spec; nothing else lists tools.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langchain_core.tools.base import create_schema_from_function
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool
from pydantic import SkipValidation, ValidationError

from app.db.writes import WriteOutcome
from app.domain.models import Customer, Order, Product
from app.fencing import LeaseLost
from app.notify.codes import IdentityCodes
from app.tools.results import (
    Observation,
    ObservationFormat,
    argument_ids,
    error,
    failure,
    found,
    message,
)
from app.tools.scope import Runtime, conversation_customer
from app.tools.text import DEFAULT_LIMIT

log = structlog.get_logger(__name__)

Access = Literal["read", "write"]
TOOL_FAILED = "Error: the request could not be completed; nothing was changed. Try again later."
# The arguments every tool function takes besides the model's: its collaborators and the
# runtime LangGraph injects.
_NOT_FOR_THE_MODEL = ["run_manager", "callbacks", "deps"]


@dataclass(frozen=True)
class ToolDeps:
    """What the tool functions work with, built once by the registry."""

    pool: AsyncConnectionPool[Any]
    codes: IdentityCodes


ToolFn = Callable[..., Awaitable[Any]]  # (deps, <the model's arguments>, runtime) -> Observation
OrderLine = Callable[[Mapping[str, Any], Order, Customer, Mapping[str, Product]], str | None]
ArgsLine = Callable[[Mapping[str, Any], str | None], str | None]


@dataclass(frozen=True)
class Confirm:
    """The one line the confirmation card shows for a pending write.

    `generic` may name `{order_id}` and `{user_id}`. `order` words it from the order as it
    is now (and the rule's dry run), `args` from the arguments alone; when they give None,
    or fail, the generic line is shown.
    """

    generic: str
    order: OrderLine | None = None
    args: ArgsLine | None = None


def plain_outcome(outcome: WriteOutcome) -> Observation:
    """A write whose recorded outcome is a sentence ("Transfer successful")."""
    return found(outcome.text) if outcome.ok else error("refused", outcome.text)


@dataclass(frozen=True)
class ToolSpec:
    fn: ToolFn
    access: Access
    label: str  # for the page: "Cancelling {order} …"; `{order}` or any argument's name
    cacheable: bool = False
    confirm: Confirm | None = None  # writes
    # How a write's outcome reads, fresh or recorded (a replay, a crash repair).
    outcome: Callable[[WriteOutcome], Observation] = plain_outcome
    limit: int = DEFAULT_LIMIT  # characters of the text rendering
    label_fallback: str | None = None  # the label when an argument it names is missing

    @property
    def name(self) -> str:
        return self.fn.__name__

    def tool(self, deps: ToolDeps) -> ShopTool:
        return ShopTool(
            name=self.name,
            description=_description(inspect.getdoc(self.fn) or self.name),
            args_schema=create_schema_from_function(
                self.name, self.fn, filter_args=_NOT_FOR_THE_MODEL
            ),
            coroutine=self.fn,
            handle_validation_error=invalid_arguments,
            response_format="content_and_artifact",
            spec=self,
            deps=deps,
        )

    def observed(
        self,
        observation: Observation,
        args: Mapping[str, Any],
        customer_id: str | None,
        observation_format: ObservationFormat,
    ) -> tuple[str, Any]:
        """(content, artifact) of an observation of this tool."""
        more = argument_ids(args)
        if self.access == "write" and customer_id:
            more["customer"] = [*more.get("customer", []), customer_id]
        artifact = observation.artifact(cacheable=self.cacheable, more_ids=more)
        return observation.content(observation_format, self.limit), artifact


def read_tool(
    *, label: str, cacheable: bool = True, limit: int = DEFAULT_LIMIT, label_fallback: str = ""
) -> Callable[[ToolFn], ToolSpec]:
    def declare(fn: ToolFn) -> ToolSpec:
        return ToolSpec(
            fn=fn,
            access="read",
            label=label,
            cacheable=cacheable,
            limit=limit,
            label_fallback=label_fallback or None,
        )

    return declare


def write_tool(
    *,
    label: str,
    confirm: Confirm,
    outcome: Callable[[WriteOutcome], Observation] = plain_outcome,
) -> Callable[[ToolFn], ToolSpec]:
    def declare(fn: ToolFn) -> ToolSpec:
        return ToolSpec(fn=fn, access="write", label=label, confirm=confirm, outcome=outcome)

    return declare


class ShopTool(StructuredTool):
    """A tool built from its spec: never raises, answers (content, artifact), and renders
    its content in the graph's observation format (the tau-bench JSON until bound)."""

    spec: SkipValidation[ToolSpec]
    deps: SkipValidation[ToolDeps]
    observation_format: ObservationFormat = "json"

    def bound(self, observation_format: ObservationFormat) -> ShopTool:
        if observation_format == self.observation_format:
            return self
        return self.model_copy(update={"observation_format": observation_format})

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        runtime: Runtime | None = kwargs.get("runtime")
        try:
            result = await self.spec.fn(self.deps, *args, **kwargs)
        except LeaseLost:
            raise  # the run lost its thread: it ends, no observation for the model
        except Exception:
            log.exception("tool failed", tool=self.name)
            result = error("failed", TOOL_FAILED)
        if isinstance(result, WriteOutcome):
            result = self.spec.outcome(result)
        writes = self.spec.access == "write" and runtime is not None
        customer = conversation_customer(runtime) if writes else None  # type: ignore[arg-type]
        call_args = {k: v for k, v in kwargs.items() if k != "runtime"}
        content, artifact = self.spec.observed(result, call_args, customer, self.observation_format)
        if result.changes is None:
            return content, artifact
        call_id = runtime.tool_call_id if runtime is not None else None
        update = {
            **result.changes,
            "messages": [message(content, artifact, tool_call_id=call_id or "", name=self.name)],
        }
        return Command(update=update), None

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        result = await super().ainvoke(input, config, **kwargs)
        if isinstance(result, ToolMessage):
            if not isinstance(result.artifact, dict):
                # LangChain's own answer to arguments that do not match the schema
                result.artifact = failure("invalid_arguments")
            if result.artifact.get("outcome") == "error":
                result.status = "error"
        return result


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
