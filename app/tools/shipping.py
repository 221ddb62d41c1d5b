"""Arithmetic tools: shipping cost and a calculator. No identity, no database."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from pydantic import Field, WithJsonSchema

from app.domain import calculator
from app.domain import shipping as shipping_rules
from app.domain.errors import RuleViolation
from app.tools.results import Observation, error, found
from app.tools.scope import Runtime
from app.tools.spec import ToolDeps, read_tool
from app.tools.text import shipping_lines

Number = Annotated[Decimal, WithJsonSchema({"type": "number"})]


@read_tool(label="Estimating shipping …")
async def calc_shipping(
    deps: ToolDeps,
    distance_km: Annotated[
        Number, Field(description="Shipping distance in kilometres, 0 to 20000.")
    ],
    weight_kg: Annotated[Number, Field(description="Parcel weight in kilograms, 0 to 1000.")],
    runtime: Runtime,
) -> Observation:
    """Calculate the shipping cost in CNY for a parcel: 5 + 0.8 per km + 2 per kg,
    rounded to the cent. Returns {"shipping_cost": ..., "currency": "CNY"}."""
    try:
        cost = shipping_rules.calc_shipping(distance_km, weight_kg)
    except RuleViolation as refused:
        return error("refused", refused.message)
    return found({"shipping_cost": cost, "currency": "CNY"}, shipping_lines)


@read_tool(label="Calculating …")
async def calculate(
    deps: ToolDeps,
    expression: Annotated[
        str,
        Field(
            description="The expression to calculate, such as '2 + 2'. It may contain "
            "numbers, the operators + - * /, parentheses and spaces."
        ),
    ],
    runtime: Runtime,
) -> Observation:
    """Calculate the result of an arithmetic expression, rounded to 2 decimals. Use it
    for sums of prices, refunds and price differences instead of doing math yourself."""
    try:
        result = calculator.calculation_text(calculator.calculate(expression))
    except RuleViolation as refused:
        return error("refused", refused.message)
    return found(result, lambda number: f"Result: {number}")


TOOLS = (calc_shipping, calculate)
