"""One declaration per tool: its function, read or write, its page label, whether its result
may be cached, and for a write the line the customer confirms.

    @read_tool(label="Looking up {order} …", cacheable=True)
    async def get_order_details(deps: ToolDeps, order_id: OrderId, runtime: Runtime) -> ...:
        \"\"\"The docstring is the description the model reads.\"\"\"

    @write_tool(label="Cancelling {order} …", confirm=Confirm("Cancel order {order_id}"))
    def cancel_pending_order(session: Session, order_id: OrderId, ...) -> WriteAction:
        \"\"\"A write's function only builds its action; the spec runs it once per call
        (app/tools/writing.py).\"\"\"

Arguments whose type carries `PERSONAL` are dropped from a write's records when its
thread or customer is erased (app/db/erase.py). The registry, the graph's write list, the
tool cache, the confirmation card, the erase and the page's labels all read the spec;
nothing else lists tools.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import structlog
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools.base import create_schema_from_function
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool
from pydantic import SkipValidation, ValidationError

from app.db.writes import Result, WriteAction, WriteOutcome
from app.domain.errors import RuleViolation
from app.domain.models import Customer, Order, Product
from app.fencing import LeaseLost
from app.notify.codes import IdentityCodes
from app.tools.results import (
    TOOL_FAILED,
    Observation,
    ObservationFormat,
    argument_ids,
    failed_with,
    found,
    invalid_arguments,
    message,
    settled,
    validation_problems,
)
from app.tools.scope import Runtime, conversation_customer
from app.tools.text import DEFAULT_LIMIT
from app.tools.writing import Session, run_write

log = structlog.get_logger(__name__)

Access = Literal["read", "write"]
# The arguments a tool function takes besides the model's: its collaborators, and for a
# write the session it is made for. (LangGraph's injected runtime is left out by its type.)
_NOT_FOR_THE_MODEL = ["run_manager", "callbacks", "deps", "session"]
_NOT_INJECTED = {*_NOT_FOR_THE_MODEL, "runtime"}


class Personal:
    """Marks an argument type as personal data: `Annotated[str, Field(...), PERSONAL]`."""


PERSONAL = Personal()


@dataclass(frozen=True)
class ToolDeps:
    """What the tool functions work with, built once by the registry."""

    pool: AsyncConnectionPool[Any]
    codes: IdentityCodes


# A read: async (deps, <the model's arguments>, runtime) -> Observation.
# A write: (session, <the model's arguments>) -> WriteAction.
ToolFn = Callable[..., Any]
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
    return found(outcome.text) if outcome.ok else failed_with("refused", outcome.text)


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
    needs_customer: bool = True  # a write refused until the customer is verified
    asks: bool = True  # a write the customer approves first; False: it changes no data
    # The page's line for a successful result, when the result's own first line is not for
    # the customer (an internal id, "Result of search_help_center: 1 field").
    done: str | None = None

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def args_schema(self) -> Any:
        """The model's arguments, validated (a pydantic model)."""
        return create_schema_from_function(self.name, self.fn, filter_args=_NOT_FOR_THE_MODEL)

    def arguments(self) -> dict[str, bool]:
        """The model's arguments in order, each True when it is personal data."""
        hints = get_type_hints(self.fn, include_extras=True)
        names = [n for n in inspect.signature(self.fn).parameters if n not in _NOT_INJECTED]
        return {name: _personal(hints.get(name)) for name in names}

    def action(self, session: Session, args: Mapping[str, Any]) -> WriteAction:
        """A write's action for these (validated) arguments."""
        built: WriteAction = self.fn(session, **args)
        return built

    def tool(self, deps: ToolDeps) -> ShopTool:
        return ShopTool(
            name=self.name,
            description=_description(inspect.getdoc(self.fn) or self.name),
            args_schema=self.args_schema,
            handle_validation_error=_invalid,
            response_format="content_and_artifact",
            # A read's function is its coroutine (LangGraph reads its runtime argument); a
            # write's only builds an action, which `_arun` runs.
            coroutine=self.fn if self.access == "read" else None,
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
    *,
    label: str,
    cacheable: bool = True,
    limit: int = DEFAULT_LIMIT,
    label_fallback: str = "",
    done: str = "",
) -> Callable[[ToolFn], ToolSpec]:
    def declare(fn: ToolFn) -> ToolSpec:
        return ToolSpec(
            fn=fn,
            access="read",
            label=label,
            cacheable=cacheable,
            limit=limit,
            label_fallback=label_fallback or None,
            done=done or None,
        )

    return declare


def write_tool(
    *,
    label: str,
    confirm: Confirm,
    outcome: Callable[[WriteOutcome], Observation] = plain_outcome,
    needs_customer: bool = True,
    asks: bool = True,
    done: str = "",
) -> Callable[[ToolFn], ToolSpec]:
    def declare(fn: ToolFn) -> ToolSpec:
        return ToolSpec(
            fn=fn,
            access="write",
            label=label,
            confirm=confirm,
            outcome=outcome,
            needs_customer=needs_customer,
            asks=asks,
            done=done or None,
        )

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

    @functools.cached_property
    def _injected_args_keys(self) -> frozenset[str]:
        return frozenset({"runtime"})  # every shop tool gets LangGraph's runtime

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        runtime: Runtime | None = kwargs.get("runtime")
        try:
            result = await self._call(args, kwargs)
        except LeaseLost:
            raise  # the run lost its thread: it ends, no observation for the model
        except Exception:
            log.exception("tool failed", tool=self.name)
            result = failed_with("failed", TOOL_FAILED)
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

    async def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.spec.access == "read":
            return await self.spec.fn(self.deps, *args, **kwargs)
        model_args = {k: v for k, v in kwargs.items() if k != "runtime"}
        runtime = kwargs.get("runtime")
        refusal = offered_refusal(runtime)
        return await run_write(
            self.deps.pool,
            runtime,
            tool_name=self.name,
            args=model_args,
            action_for=(
                (lambda _: refused_by_rule(refusal))
                if refusal is not None
                else (lambda session: self.spec.action(session, model_args))
            ),
            needs_customer=self.spec.needs_customer,
        )

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        # BaseTool's: StructuredTool's would run a tool without a coroutine in a thread
        result = await BaseTool.ainvoke(self, input, config, **kwargs)
        if isinstance(result, ToolMessage):
            # LangChain answers arguments that do not match the schema itself, artifact-less
            return settled(result, "invalid_arguments")
        return result


def offered_refusal(runtime: Any) -> str | None:
    """The rule's refusal the confirm step found for this call (so it was never offered to
    the customer), or None."""
    if runtime is None:
        return None
    impossible = (getattr(runtime, "state", None) or {}).get("impossible") or {}
    refusal = impossible.get(getattr(runtime, "tool_call_id", None) or "")
    return refusal if isinstance(refusal, str) else None


def refused_by_rule(message: str) -> WriteAction:
    """An action that changes nothing and is refused with `message`: recorded, keyed and
    audited like any refused write, never run for real without the customer's yes."""

    async def refuse(_: Any) -> Result:
        raise RuleViolation(message)

    return refuse


def _description(doc: str) -> str:
    """Paragraphs of the docstring, each on one line."""
    paragraphs = doc.split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _invalid(problem: ValidationError) -> str:
    return invalid_arguments(validation_problems(problem))


def _personal(hint: Any) -> bool:
    return get_origin(hint) is Annotated and any(isinstance(m, Personal) for m in get_args(hint))
