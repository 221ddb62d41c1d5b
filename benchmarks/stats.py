"""Percentiles and summaries. Linear interpolation between closest ranks (numpy's default)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Iterable[float], q: float) -> float:
    data = sorted(values)
    if not data:
        return math.nan
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def median(values: Iterable[float]) -> float:
    return percentile(values, 50)


def p95(values: Iterable[float]) -> float:
    return percentile(values, 95)


def med_p95(values: Sequence[float]) -> tuple[float, float]:
    return median(values), p95(values)


def fmt(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def fmt_pair(values: Sequence[float], digits: int = 1) -> str:
    """'median / p95' over repeated runs."""
    if not values:
        return "n/a"
    mid, high = med_p95(values)
    return f"{fmt(mid, digits)} / {fmt(high, digits)}"
