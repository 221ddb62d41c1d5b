"""Request bodies and response shapes of the HTTP API."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from app.identity import USER_ID_RE

# Postgres text cannot hold NUL, so a NUL that reached a query was a 500. Every text input is
# checked here, at the edge: free text may hold tabs and line breaks, and no other control
# character; an id or a cursor holds none.
_CONTROL_IN_TEXT_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CONTROL_IN_LINE_RE = re.compile(r"[\x00-\x1f\x7f]")


def _no_control_in_text(value: str) -> str:
    if _CONTROL_IN_TEXT_RE.search(value):
        raise ValueError("must not contain control characters other than tab and line breaks")
    return value


def _no_control_in_line(value: str) -> str:
    if _CONTROL_IN_LINE_RE.search(value):
        raise ValueError("must not contain control characters")
    return value


class _Pattern:
    """States a validator's rule as a `pattern` in the JSON schema (OpenAPI), so clients and
    fuzzers know it; the validator's own message stays the one a client gets."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __get_pydantic_json_schema__(
        self, core: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core)
        schema["pattern"] = self.pattern
        return schema


TEXT_PATTERN = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]*$"
LINE_PATTERN = "^[^\\u0000-\\u001f\\u007f]*$"
Text = Annotated[str, AfterValidator(_no_control_in_text), _Pattern(TEXT_PATTERN)]
"""Free text (a message, a search): tabs and line breaks, no other control character."""
Line = Annotated[str, AfterValidator(_no_control_in_line), _Pattern(LINE_PATTERN)]
"""An id, a cursor: no control character at all."""


# Text with one character that is neither white space nor control: what `_not_blank` keeps.
NOT_BLANK_PATTERN = (
    "^[^\\S\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]*"
    "[^\\s\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]"
    "[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f]*$"
)


class MessageIn(BaseModel):
    content: Text = Field(
        min_length=1, max_length=8000, json_schema_extra={"pattern": NOT_BLANK_PATTERN}
    )
    client_message_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$"
    )

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class ResumeIn(BaseModel):
    decision: Literal["approve", "reject"]


def _one_of_the_two(schema: dict[str, Any]) -> None:
    """RewindIn's schema as two whole alternatives (a `oneOf` beside `properties` is
    read loosely by some generators)."""
    props = schema.pop("properties")
    schema.pop("type", None)
    schema["oneOf"] = [
        {
            "type": "object",
            "required": [given],
            "properties": {given: props[given]["anyOf"][0], other: {"type": "null"}},
        }
        for given, other in (("checkpoint_id", "message_id"), ("message_id", "checkpoint_id"))
    ]


class RewindIn(BaseModel):
    """Exactly one of the two: `checkpoint_id` rewinds to that checkpoint (as
    GET /threads/{session_id}/history lists them); `message_id` rewinds to just before that
    message (as the state's `messages` carry ids), so the message and all after it go."""

    model_config = ConfigDict(json_schema_extra=_one_of_the_two)

    checkpoint_id: Line | None = Field(default=None, min_length=1, max_length=64)
    message_id: Line | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _exactly_one(self) -> RewindIn:
        if (self.checkpoint_id is None) == (self.message_id is None):
            raise ValueError("give exactly one of checkpoint_id or message_id")
        return self


class DemoLoginIn(BaseModel):
    """A guest gets a new id of their own (any `user_id` is ignored); staff are `staff-...`
    (`staff-demo` when none is given); a customer names a customer id, which is neither
    `guest-...` nor `staff-...`."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"properties": {"role": {"const": "guest"}}, "required": ["role"]},
                {
                    "properties": {
                        "role": {"const": "staff"},
                        "user_id": {"type": ["string", "null"], "pattern": "^staff-"},
                    },
                    "required": ["role"],
                },
                {
                    "properties": {
                        "role": {"const": "customer"},
                        "user_id": {"type": "string", "not": {"pattern": "^(guest|staff)-"}},
                    },
                    "required": ["user_id"],
                },
            ]
        }
    )

    user_id: str | None = Field(default=None, pattern=USER_ID_RE.pattern)
    # never "admin": the demo sign-in does not mint admins (`cs-agent token --role admin`)
    role: Literal["customer", "guest", "staff"] = "customer"
    name: str | None = Field(default=None, max_length=80)  # a staff member's display name


class DemoCustomerOut(BaseModel):
    user_id: str
    name: str
    email: str


class TokenOut(BaseModel):
    token: str


class ThreadCreated(BaseModel):
    id: str
    created_at: datetime


class ThreadItem(BaseModel):
    id: str
    title: str
    created_at: datetime
    updated_at: datetime
    message_count: int


class ThreadPage(BaseModel):
    items: list[ThreadItem]
    next_cursor: str | None


class MessageView(BaseModel):
    id: str | None
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    status: str | None = None
    thought: str | None = None
    author: Literal["customer", "agent", "staff"] | None = None  # tool results: none
    kind: Literal["note"] | None = None  # a note handed back to the agent with a release


class TurnResult(BaseModel):
    run_id: str | None = None
    messages: list[MessageView]
    checkpoint_id: str | None
    status: Literal["completed", "interrupted", "failed", "cancelled", "handed_off"]
    pending: list[dict[str, Any]] | None = None
    # handed_off: a person holds the thread, the message was stored for them (no run)
    control: dict[str, Any] | None = None
    usage: dict[str, int] | None = None
    # the help articles a completed answer drew on (the `citations` event of the stream)
    citations: list[dict[str, Any]] = []


class ThreadState(BaseModel):
    id: str
    checkpoint_id: str | None
    parent_checkpoint_id: str | None
    next: list[str]
    messages: list[MessageView]
    pending: list[dict[str, Any]] | None = None
    verified_user_id: str | None = None
    handed_off: bool = False
    breakers: dict[str, Any]
    citations: list[dict[str, Any]] = []
    summary: str | None = None
    view: Literal["transcript", "working"] = "transcript"
    created_at: str | None
    # who answers the thread: the agent, or a person (Human takeover in the README)
    control: dict[str, Any] | None = None
    # the policy version the thread is pinned to (app/policies): its rules answer it
    policy_version: int | None = None
    # the channel it happens on, when not the chat page: {"name": "chatwoot"|"email", "link"}
    channel: dict[str, Any] | None = None


class HistoryItem(BaseModel):
    checkpoint_id: str | None
    parent_checkpoint_id: str | None
    step: int | None
    source: str | None
    created_at: str | None
    next: list[str]
    message_count: int
    last_message: dict[str, Any] | None


class HistoryPage(BaseModel):
    items: list[HistoryItem]
    next_cursor: str | None


class PreferenceOut(BaseModel):
    key: str
    value: str
    updated_at: str


class ErrorDetail(BaseModel):
    """What went wrong: a stable `code` to branch on, a sentence for people, and for some
    codes more fields (`retry_after_s`, `lease_ttl_s`, ...)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error the service answers, whatever its status."""

    error: ErrorDetail
