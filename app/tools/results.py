"""What a tool call gives back: the text the model reads, and an artifact for everyone else.

The text is the tool's own rendering of its result (`OBSERVATION_FORMAT=text`), or the
tau-bench JSON value as text (`json`). The artifact (`ToolMessage.artifact`) is the
structured view that the agent's bookkeeping, the cache, the citations ledger and the
breakers read, so none of them ever parses a result's text:

    {"outcome": "ok" | "error" | "declined", "kind": <why it failed>,
     "ids": {"order": [...], "customer": [...], "payment_method": [...], ...},
     "cacheable": bool, "cache": "hit" | "miss", "article": {"id", "title", "snippet"}}

`ToolMessage.status` is "error" exactly when the outcome is (`status_of`, the one place
it is decided). A failure's text is `error_text` (its prefix), `TOOL_FAILED` when nothing
more may be said, or `invalid_arguments`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from langchain_core.messages import ToolMessage
from pydantic import ValidationError

from app.db.writes import TOOL_FAILED as TOOL_FAILED
from app.db.writes import error_text as error_text
from app.jsontext import compact_json
from app.tools.text import DEFAULT_LIMIT, View, bounded

Outcome = Literal["ok", "error", "declined"]
ErrorKind = Literal[
    "not_verified",  # the conversation has no verified customer yet
    "not_found",  # no such order, user, product or article (for this customer)
    "refused",  # a business rule or identity rule said no; nothing changed
    "invalid_arguments",  # the call's arguments did not match the schema
    "unknown_tool",
    "failed",  # something unexpected; nothing changed
    "breaker_open",  # the circuit breaker refused the call
    "call_cap",  # too many calls of this tool in the turn
    "interrupted",  # the call never ran (a crash, a cancelled run)
    "outcome_unknown",  # a remote write was sent and its result never came (app/actions)
]
IdKind = Literal["order", "customer", "payment_method", "product", "article"]
ObservationFormat = Literal["text", "json"]
# Arguments that name what a call is about, as artifact id kinds.
ID_ARGUMENTS: dict[str, IdKind] = {
    "order_id": "order",
    "user_id": "customer",
    "payment_method_id": "payment_method",
    "product_id": "product",
}


class Article(TypedDict):
    id: str
    title: str
    snippet: str


class Artifact(TypedDict, total=False):
    outcome: Outcome
    kind: ErrorKind
    ids: dict[str, list[str]]
    cacheable: bool
    cache: Literal["hit", "miss"]  # set by the read node: served from, or stored in, the cache
    article: Article  # a help article that was read, for the citations ledger


def artifact_of(message: ToolMessage, fallback: ErrorKind = "failed") -> Artifact:
    """The message's artifact. A tool not declared with a spec (a test's probe), or
    LangChain's own answer to arguments that miss the schema, has none: its status says how
    it went, and `fallback` why it failed."""
    artifact = message.artifact
    if isinstance(artifact, dict) and "outcome" in artifact:
        return artifact  # type: ignore[return-value]
    if message.status == "error":
        return Artifact(outcome="error", kind=fallback)
    return Artifact(outcome="ok")


def failure(kind: ErrorKind) -> Artifact:
    return Artifact(outcome="error", kind=kind)


def invalid_arguments(detail: str) -> str:
    return error_text(f"invalid arguments ({detail}). Check the tool's argument schema and retry.")


def malformed_arguments(name: str) -> str:
    """A call whose arguments were not JSON at all, so no schema could check them."""
    return error_text(
        f"the arguments for {name} were not valid JSON. Call it again with a JSON object "
        "matching its schema."
    )


def validation_problems(problem: ValidationError) -> str:
    """The fields a call got wrong, for `invalid_arguments` (never the injected runtime)."""
    problems = [
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
        for e in problem.errors()
        if e["loc"][:1] != ("runtime",)
    ]
    return "; ".join(problems[:5]) or "the arguments do not match the schema"


def status_of(artifact: Artifact) -> Literal["error", "success"]:
    return "error" if artifact.get("outcome") == "error" else "success"


def message(content: str, artifact: Artifact, *, tool_call_id: str, name: str) -> ToolMessage:
    """A ToolMessage whose status agrees with its artifact."""
    return ToolMessage(
        content=content,
        artifact=artifact,
        tool_call_id=tool_call_id,
        name=name,
        status=status_of(artifact),
    )


def settled(result: ToolMessage, fallback: ErrorKind = "failed") -> ToolMessage:
    """A result as every reader expects it: an artifact (`fallback` names the failure of
    one that has none and says it failed), and a status that agrees."""
    artifact = artifact_of(result, fallback)
    status = status_of(artifact)
    if result.artifact is artifact and result.status == status:
        return result
    return result.model_copy(update={"artifact": artifact, "status": status})


@dataclass(frozen=True)
class Observation:
    """What a tool function returns: its tau-bench result and how the model reads it.

    `value` is what `OBSERVATION_FORMAT=json` shows (a JSON-able value, or a sentence), and
    `text` renders it for the text format (None: the sentence itself). An error's or a
    refusal's value is the sentence the model reads in either format.
    """

    value: Any
    text: Callable[[Any], View | str] | None = None
    outcome: Outcome = "ok"
    kind: ErrorKind | None = None
    ids: Mapping[str, Iterable[str]] = field(default_factory=dict)
    article: Article | None = None
    # State the result writes besides its message (the verified customer, a hand-over).
    changes: Mapping[str, Any] | None = None

    def content(self, observation_format: ObservationFormat, limit: int = DEFAULT_LIMIT) -> str:
        value = self.value
        if self.outcome != "ok":
            return str(value)
        if observation_format == "json":
            return value if isinstance(value, str) else compact_json(value)
        shown = self.text(value) if self.text is not None else str(value)
        return bounded(shown, limit)

    def artifact(
        self, *, cacheable: bool, more_ids: Mapping[str, Iterable[str]] | None = None
    ) -> Artifact:
        artifact = Artifact(outcome=self.outcome)
        if self.kind is not None:
            artifact["kind"] = self.kind
        ids = merged_ids(self.ids, more_ids or {})
        if ids:
            artifact["ids"] = ids
        artifact["cacheable"] = cacheable and self.outcome == "ok"
        if self.article is not None:
            artifact["article"] = self.article
        return artifact


def found(
    value: Any,
    text: Callable[[Any], View | str] | None = None,
    *,
    ids: Mapping[str, Iterable[str]] | None = None,
    article: Article | None = None,
    changes: Mapping[str, Any] | None = None,
) -> Observation:
    return Observation(value, text, ids=ids or {}, article=article, changes=changes)


def error(kind: ErrorKind, sentence: str) -> Observation:
    """A failed call: the model reads `sentence` as an error (`error_text`)."""
    return Observation(error_text(sentence), outcome="error", kind=kind)


def failed_with(kind: ErrorKind, text: str) -> Observation:
    """A failed call whose text is already an error's (`error_text`, a recorded outcome)."""
    return Observation(text, outcome="error", kind=kind)


def declined(text: str) -> Observation:
    return Observation(text, outcome="declined")


def merged_ids(*sources: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for source in sources:
        for kind, values in source.items():
            known = out.setdefault(kind, [])
            known.extend(str(v) for v in values if v is not None and str(v) not in known)
    return {k: v for k, v in out.items() if v}


def argument_ids(args: Mapping[str, Any]) -> dict[str, list[str]]:
    """The ids a call's own arguments name."""
    return {
        kind: [str(value)]
        for key, kind in ID_ARGUMENTS.items()
        if isinstance(value := args.get(key), str | int) and not isinstance(value, bool)
    }


@dataclass(frozen=True)
class Assessment:
    """What the confirm step needs to know of a pending write, before asking for it."""

    ask: bool  # the customer approves it first (a handoff changes no order or account)
    summary: str  # the confirmation card's one line
    # The write's rule refuses it as things are now (its message): the write is recorded
    # as that refusal instead of offered on a card the customer could only approve into
    # a failure.
    refusal: str | None = None
