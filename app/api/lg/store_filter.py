"""A store search's `filter`, as the store turns it into SQL (langgraph's PostgresStore):
each key is a top-level key of an item's value; a plain value is an equality, an object is
operators, `$eq` and `$ne` against any JSON, `$gt`, `$gte`, `$lt` and `$lte` against a
number or a string (compared as the text of the value). Anything else was a 500 (an object
meant as a nested equality reads as unknown operators): here it is a typed 422, and the
OpenAPI document says the same."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from app.api.clientjson import JSON_VALUE, NO_NUL, RULES, check_client_json, ref
from app.errors import STORE_FILTER_INVALID

EQUALITY = ("$eq", "$ne")
ORDER = ("$gt", "$gte", "$lt", "$lte")


def _refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError(STORE_FILTER_INVALID, "{problem}", {"problem": message})


def _checked(value: dict[str, Any]) -> dict[str, Any]:
    try:
        check_client_json(value)
    except ValueError as refused:
        raise _refuse(str(refused)) from None
    for key, wanted in value.items():
        if not isinstance(wanted, dict):
            continue
        unknown = sorted(set(wanted) - {*EQUALITY, *ORDER})
        if unknown:
            raise _refuse(
                f"{key}: an object in a filter is operators ({', '.join(EQUALITY + ORDER)}), "
                f"not {', '.join(unknown)}"
            )
        for op in ORDER:
            if op in wanted and (
                isinstance(wanted[op], bool) or not isinstance(wanted[op], int | float | str)
            ):
                raise _refuse(f"{key}.{op}: compares with a number or a string")
    return value


def _schema() -> dict[str, Any]:
    nested = ref(JSON_VALUE)
    operators: dict[str, Any] = {op: nested for op in EQUALITY}
    operators |= {op: {"type": ["number", "string"], "pattern": NO_NUL} for op in ORDER}
    condition = {
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "number"},
            {"type": "string", "pattern": NO_NUL},
            {"type": "array", "items": nested},
            {"type": "object", "properties": operators, "additionalProperties": False},
        ]
    }
    return {
        "type": "object",
        "propertyNames": {"pattern": NO_NUL},
        "additionalProperties": condition,
        "description": "Each key a top-level key of an item's value: a value to equal, or "
        "operators ($eq, $ne: any JSON; $gt, $gte, $lt, $lte: a number or a string). " + RULES,
    }


StoreFilter = Annotated[dict[str, Any], AfterValidator(_checked), WithJsonSchema(_schema())]
