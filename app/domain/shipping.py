"""Shipping cost: 5 CNY base + 0.8 per km + 2 per kg, to the cent."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from app.domain.errors import RuleViolation
from app.domain.models import CENT

BASE_FEE = Decimal("5")
PER_KM = Decimal("0.8")
PER_KG = Decimal("2")
MAX_DISTANCE_KM = Decimal("20000")
MAX_WEIGHT_KG = Decimal("1000")


def calc_shipping(distance_km: Decimal, weight_kg: Decimal) -> Decimal:
    _require_in_range("distance_km", distance_km, MAX_DISTANCE_KM, "km")
    _require_in_range("weight_kg", weight_kg, MAX_WEIGHT_KG, "kg")
    cost = BASE_FEE + PER_KM * distance_km + PER_KG * weight_kg
    return cost.quantize(CENT, rounding=ROUND_HALF_UP)


def _require_in_range(name: str, value: Decimal, limit: Decimal, unit: str) -> None:
    if not value.is_finite():
        raise RuleViolation(f"{name} must be a finite number.")
    if value < 0:
        raise RuleViolation(f"{name} must not be negative.")
    if value > limit:
        raise RuleViolation(f"{name} must be at most {limit} {unit}.")
