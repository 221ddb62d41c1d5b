"""Arithmetic tools: shipping cost and a calculator. No identity, no database."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from langchain_core.tools import BaseTool
from pydantic import Field, WithJsonSchema

from app.domain import calculator
from app.domain import shipping as shipping_rules
from app.domain.errors import RuleViolation
from app.jsontext import compact_json
from app.tools.base import make_tool
from app.tools.scope import Runtime

Number = Annotated[Decimal, WithJsonSchema({"type": "number"})]


def arithmetic_tools() -> list[BaseTool]:
    async def calc_shipping(
        distance_km: Annotated[
            Number, Field(description="Shipping distance in kilometres, 0 to 20000.")
        ],
        weight_kg: Annotated[Number, Field(description="Parcel weight in kilograms, 0 to 1000.")],
        runtime: Runtime,
    ) -> str:
        """Calculate the shipping cost in CNY for a parcel: 5 + 0.8 per km + 2 per kg,
        rounded to the cent. Returns {"shipping_cost": ..., "currency": "CNY"}."""
        try:
            cost = shipping_rules.calc_shipping(distance_km, weight_kg)
        except RuleViolation as refused:
            return f"Error: {refused.message}"
        return compact_json({"shipping_cost": cost, "currency": "CNY"})

    async def calculate(
        expression: Annotated[
            str,
            Field(
                description="The expression to calculate, such as '2 + 2'. It may contain "
                "numbers, the operators + - * /, parentheses and spaces."
            ),
        ],
        runtime: Runtime,
    ) -> str:
        """Calculate the result of an arithmetic expression, rounded to 2 decimals. Use it
        for sums of prices, refunds and price differences instead of doing math yourself."""
        try:
            return calculator.calculation_text(calculator.calculate(expression))
        except RuleViolation as refused:
            return f"Error: {refused.message}"

    return [make_tool("calc_shipping", calc_shipping), make_tool("calculate", calculate)]
