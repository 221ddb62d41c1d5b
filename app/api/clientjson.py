"""Client JSON that is stored as `jsonb` or compared in SQL, checked once at the edge.

JSON text allows what Postgres' jsonb refuses: a NUL (`\\u0000`) in a string or a key, an
unpaired UTF-16 surrogate (`"\\ud899"`), and a number past a double (`1e400` parses to
infinity, which no JSON can carry). Each of them reached a query as a 500 before. The
depth, breadth and size bounds keep one body from costing more than its use is worth.

`ClientObject` and `ClientJson` are the field types for such JSON: they validate (a typed
422, `client_json_invalid`) and they state the same rules in the OpenAPI document (the
`JsonValue` schema, `openapi_components()`), so a generated client or a fuzzer knows
them. Only what JSON Schema cannot say (surrogates, finite numbers, the byte size) is
left to the description.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from app.errors import CLIENT_JSON_INVALID

# Nested objects and arrays, the outermost counted. JSON Schema cannot state a depth short of
# one schema per level (which made schemathesis's coverage phase draw tens of thousands of
# cases for one body), so the document says it in words, and a fuzzer drawing from the
# recursive schema may nest past it: at 8 it did (9 deep, once in 25,000 cases), at 32 a
# random draw does not (each level is one draw in three). 32 levels of 256 members in 64 kB
# still cost a validator and Postgres next to nothing.
MAX_DEPTH = 32
MAX_ITEMS = 256  # members of one object or array
MAX_BYTES = 65_536  # the value as compact JSON
MAX_INT_BITS = 3_000  # about 900 digits: past that, an integer is not data but a load test
NO_NUL = "^[^\\u0000]*$"
RULES = (
    f"JSON stored as given: no NUL character in a string or a key, no unpaired UTF-16 "
    f"surrogate, finite numbers, at most {MAX_DEPTH} nested objects or arrays of at most "
    f"{MAX_ITEMS} members each, and at most {MAX_BYTES} bytes in all."
)


class ClientJsonError(ValueError):
    """What is wrong with a client's JSON, and where in it (`metadata.tags[2]`)."""


def _refuse(where: str, problem: str) -> ClientJsonError:
    return ClientJsonError(f"{problem} (at {where})" if where else problem)


def _has_surrogate(text: str) -> bool:
    # a str from JSON holds a pair as one code point, so any surrogate left is unpaired
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def _check_text(text: str, where: str, what: str) -> None:
    if "\x00" in text:
        raise _refuse(where, f"{what} must not contain a NUL character")
    if _has_surrogate(text):
        raise _refuse(where, f"{what} must not contain an unpaired UTF-16 surrogate")


def _check_scalar(value: Any, where: str) -> None:
    if isinstance(value, str):
        _check_text(value, where, "a string")
    elif isinstance(value, float) and not math.isfinite(value):
        raise _refuse(where, "a number must be finite (a JSON number within a double)")
    elif isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise _refuse(where, "an integer is too large")
    elif value is not None and not isinstance(value, bool | int | float):
        raise _refuse(where, "a value must be JSON")


def check_client_json(value: Any) -> Any:
    """`value` unchanged, or ClientJsonError naming where in it the problem is."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, where, depth = stack.pop()
        if not isinstance(item, dict | list):
            _check_scalar(item, where)
            continue
        if depth > MAX_DEPTH:
            raise _refuse(where, f"objects and arrays nest at most {MAX_DEPTH} deep")
        if len(item) > MAX_ITEMS:
            raise _refuse(where, f"an object or array holds at most {MAX_ITEMS} members")
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
            continue
        for key, member in item.items():
            _check_text(str(key), where, "a key")
            stack.append((member, f"{where}.{key}" if where else str(key), depth + 1))
    if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_BYTES:
        raise _refuse("", f"at most {MAX_BYTES} bytes of JSON")
    return value


def _validated(value: Any) -> Any:
    try:
        return check_client_json(value)
    except ClientJsonError as refused:
        # the message as context, not as the template: a key may hold braces
        raise PydanticCustomError(
            CLIENT_JSON_INVALID, "{problem}", {"problem": str(refused)}
        ) from None


# The document states the rules JSON Schema can say (no NUL in a string or a key) in two
# recursive schemas; the depth, breadth and size bounds are in the description. Spelling
# the depth out as one schema per level made schemathesis's coverage phase draw tens of
# thousands of cases for one body.
JSON_VALUE = "JsonValue"
EMPTY = "EmptyJson"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


SCALARS: tuple[dict[str, Any], ...] = (
    {"type": "null"},
    {"type": "boolean"},
    {"type": "number"},
    {"type": "string", "pattern": NO_NUL},
)


def json_object(values: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "propertyNames": {"pattern": NO_NUL}, "additionalProperties": values}


def json_value() -> dict[str, Any]:
    array = {"type": "array", "items": ref(JSON_VALUE)}
    return {"anyOf": [*SCALARS, array, json_object(ref(JSON_VALUE))]}


def empty_value() -> dict[str, Any]:
    """What a field the service cannot honour may still hold, as SDKs send it: nothing
    (null, `[]`, or objects of nothing, such as `{"configurable": {}}`)."""
    return {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}, empty_object()]}


def empty_object() -> dict[str, Any]:
    return json_object(ref(EMPTY))


def openapi_components() -> dict[str, dict[str, Any]]:
    return {JSON_VALUE: json_value(), EMPTY: empty_value()}


ClientJson = Annotated[
    Any,
    AfterValidator(_validated),
    WithJsonSchema({**json_value(), "description": RULES}),
]
"""Any JSON value a client sends that is kept or compared as jsonb."""

ClientObject = Annotated[
    dict[str, Any],
    AfterValidator(_validated),
    WithJsonSchema({**json_object(ref(JSON_VALUE)), "description": RULES}),
]
"""A JSON object a client sends that is kept or compared as jsonb (metadata, a value)."""

EmptyJson = Annotated[
    Any,
    AfterValidator(_validated),
    WithJsonSchema({**empty_value(), "description": "Not supported: nothing, if sent."}),
]
"""A field cs-agent refuses (typed 422) unless it holds nothing (null, `[]`, `{}`...)."""
