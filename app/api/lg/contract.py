"""What the compatible surface accepts, as JSON Schema for the OpenAPI document: the
fields it refuses by name (app/api/lg/inputs.py) are stated as accepting only what it
honours, so a generated client or a fuzzer sees the refusal in the document, not first
as a 422. Each schema mirrors the check it names; change them together."""

from __future__ import annotations

from typing import Any

from app.api.clientjson import JSON_VALUE, NO_NUL, empty_object, empty_value, ref
from app.api.lg.translate import MODES
from app.api.schemas import NOT_BLANK_PATTERN

NULL = {"type": "null"}
NOTHING = empty_value()  # inputs._filled is false
NO_OBJECT = {"anyOf": [{"type": "null"}, empty_object()]}  # the same, for an object field
FALSY = {  # `if body.interrupt_before or ...`: only what Python reads as false
    "anyOf": [
        NULL,
        {"const": False},
        {"type": "number", "const": 0},
        {"const": ""},
        {"type": "array", "maxItems": 0},
        {"type": "object", "maxProperties": 0},
    ]
}
ENDS = ["__end__", "END"]

_TEXT = {"type": "string", "minLength": 1, "maxLength": 8000, "pattern": NOT_BLANK_PATTERN}
_HUMAN_OBJECT = {
    "type": "object",
    "required": ["content"],
    "properties": {"content": _TEXT, "id": {"type": "string"}},
    "propertyNames": {"pattern": NO_NUL},
    "additionalProperties": ref(JSON_VALUE),
    "anyOf": [
        {"required": ["type"], "properties": {"type": {"enum": ["human", "user"]}}},
        {
            "required": ["role"],
            "properties": {"role": {"enum": ["human", "user"]}, "type": {"enum": [None, ""]}},
        },
    ],
}
HUMAN = {"anyOf": [_TEXT, _HUMAN_OBJECT]}
# message_of: one human message, alone or in a list (a UI's tool messages aside); none
# (null, []) is no message, which a run may have when it resumes or forks
_ONE = {"anyOf": [HUMAN, {"type": "array", "minItems": 1, "maxItems": 1, "items": HUMAN}]}
_NONE = {"anyOf": [NULL, {"type": "array", "maxItems": 0}]}


def _input(messages: dict[str, Any], *, required: bool) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["messages"] if required else [],
        "properties": {"messages": messages},
        "propertyNames": {"pattern": NO_NUL},
        "additionalProperties": empty_value(),
        "description": 'One human message: `{"messages": [{"role": "user", "content": '
        '"..."}]}` (or the message alone, or its text); nothing else.',
    }


INPUT = _input(_ONE, required=True)
ANY_INPUT = _input({"anyOf": [_ONE, _NONE]}, required=False)
STREAM_MODE = {"enum": ["", *sorted(MODES)]}
# _start: a message, a decision on a pending confirmation, or a fork from a checkpoint
RUN_NEEDS = [
    {"required": ["input"], "properties": {"input": INPUT}},
    {
        "required": ["command"],
        "properties": {
            "command": {
                "type": "object",
                "anyOf": [
                    {"required": ["resume"], "properties": {"resume": {"not": NULL}}},
                    {"required": ["goto"], "properties": {"goto": {"enum": ENDS}}},
                ],
            }
        },
    },
    {"required": ["checkpoint_id"], "properties": {"checkpoint_id": {"type": "string"}}},
    {
        "required": ["checkpoint"],
        "properties": {
            "checkpoint": {
                "type": "object",
                "required": ["checkpoint_id"],
                "properties": {"checkpoint_id": {"type": "string", "minLength": 1}},
            }
        },
    },
]


def run_create(schema: dict[str, Any]) -> None:
    """RunCreate's JSON schema, as pydantic calls `json_schema_extra`."""
    props = schema["properties"]
    props["input"] = {"anyOf": [NULL, ANY_INPUT]}
    props["config"] = {**NO_OBJECT, "description": "The server's own: nothing, if sent."}
    props["context"] = {**NO_OBJECT, "description": "From the token: nothing, if sent."}
    props["multitask_strategy"] = {"enum": [None, "reject"]}
    props["interrupt_before"] = props["interrupt_after"] = FALSY
    props["after_seconds"] = {"anyOf": [NULL, {"type": "number", "const": 0}]}
    props["on_completion"] = {"enum": [None, "keep"]}
    props["stream_mode"] = {"anyOf": [STREAM_MODE, {"type": "array", "items": STREAM_MODE}]}
    schema["anyOf"] = RUN_NEEDS


def command(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    props["update"] = {**NOTHING, "description": "State is written only by the agent."}
    props["goto"] = {
        "anyOf": [NULL, {"type": "array", "maxItems": 0}, {"enum": ENDS}],
        "description": "`__end__` declines a pending confirmation.",
    }


def thread_create(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    props["thread_id"] = {"anyOf": [NULL, {"type": "string", "pattern": "^[A-Za-z0-9_-]{0,64}$"}]}
    props["supersteps"] = {"anyOf": [NULL, {"type": "array", "maxItems": 0}]}
    props["ttl"] = NULL


def ttl_none(schema: dict[str, Any]) -> None:
    schema["properties"]["ttl"] = NULL


def thread_search(schema: dict[str, Any]) -> None:
    schema["properties"]["extract"] = {"anyOf": [NULL, {"type": "object", "maxProperties": 0}]}


def history_query(schema: dict[str, Any]) -> None:
    schema["properties"]["metadata"] = {"anyOf": [NULL, {"type": "object", "maxProperties": 0}]}


def store_put(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    props["ttl"] = NULL
    props["index"] = {"anyOf": [NULL, {"const": False}, {"type": "array", "maxItems": 0}]}


def store_search(schema: dict[str, Any]) -> None:
    schema["properties"]["query"] = {"anyOf": [NULL, {"const": ""}]}
