"""Compact JSON text that writes Decimals as exact numbers (never through float).

`canonical_json` is the one form of every key and fingerprint made from JSON: a write's
idempotency key (app/db/idempotency.py, stored), the tool cache's keys (app/agent/cache.py)
and the repeat guard's fingerprints (app/agent/books.py). Its output must not change: the
stored keys would no longer match (tests/unit/test_canonical_json.py pins it)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any


def compact_json(value: Any) -> str:
    """Keys in insertion order, no whitespace, money as written (`1463.70`)."""
    return _dump(value, canonical=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, numbers normalised so 5, 5.0 and Decimal('5.00') agree."""
    return _dump(value, canonical=True)


def _dump(value: Any, *, canonical: bool) -> str:
    if value is None or isinstance(value, (bool, str)):
        return json.dumps(value)
    if isinstance(value, (int, float, Decimal)):
        return _number(value, canonical=canonical)
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
        if canonical:
            items.sort(key=lambda kv: kv[0])
        body = ",".join(f"{json.dumps(k)}:{_dump(v, canonical=canonical)}" for k, v in items)
        return "{" + body + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        seq = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return "[" + ",".join(_dump(v, canonical=canonical) for v in seq) + "]"
    return json.dumps(str(value))


def _number(value: int | float | Decimal, *, canonical: bool) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return json.dumps(str(value))
        value = Decimal(repr(value))
    if isinstance(value, int):
        return str(value)
    if not value.is_finite():
        return json.dumps(str(value))
    if not canonical:
        return f"{value:f}"
    text = f"{value.normalize():f}"
    return "0" if text in ("-0", "0") else text
