from __future__ import annotations

from decimal import Decimal

import pytest

from app.domain.calculator import MAX_EXPRESSION_LENGTH, calculate, calculation_text
from app.domain.errors import RuleViolation


class TestCalculateEvaluates:
    @pytest.mark.parametrize(
        ("expression", "expected"),
        [
            ("2 + 2", "4.00"),
            ("2 + 3 * 4", "14.00"),
            ("(2 + 3) * 4", "20.00"),
            ("10 / 4", "2.50"),
            ("10 / 3", "3.33"),
            ("-3.5 * 2", "-7.00"),
            ("-(1 + 1)", "-2.00"),
            ("+.5 + 1.", "1.50"),
            ("1463.70 - 200.35", "1263.35"),
            ("0.1 + 0.2", "0.30"),
            ("8 - 3 - 2", "3.00"),
            ("16 / 4 / 2", "2.00"),
        ],
    )
    def test_arithmetic_with_precedence(self, expression: str, expected: str) -> None:
        assert calculate(expression) == Decimal(expected)

    def test_rounds_half_even_like_python_round(self) -> None:
        assert calculate("0.125") == Decimal("0.12")
        assert calculate("0.135") == Decimal("0.14")


class TestCalculationText:
    @pytest.mark.parametrize(
        ("value", "text"),
        [("4.00", "4.0"), ("3.30", "3.3"), ("3.33", "3.33"), ("-7.00", "-7.0"), ("0", "0.0")],
    )
    def test_renders_like_python_float(self, value: str, text: str) -> None:
        assert calculation_text(Decimal(value)) == text


class TestCalculateRefuses:
    @pytest.mark.parametrize("expression", ["1 / 0", "0 / 0", "5 / (2 - 2)"])
    def test_division_by_zero(self, expression: str) -> None:
        with pytest.raises(RuleViolation, match="division by zero"):
            calculate(expression)

    @pytest.mark.parametrize("expression", ["__import__('os')", "1e5", "2 % 3", "x"])
    def test_characters_outside_the_grammar(self, expression: str) -> None:
        with pytest.raises(RuleViolation, match="invalid characters"):
            calculate(expression)

    @pytest.mark.parametrize("expression", ["2 +", "(2", "2)", "2 3", "()", "1..2", "*2", "2 ** 3"])
    def test_malformed_expressions(self, expression: str) -> None:
        with pytest.raises(RuleViolation, match="invalid expression"):
            calculate(expression)

    def test_empty_expression(self) -> None:
        with pytest.raises(RuleViolation, match="empty"):
            calculate("   ")

    def test_overlong_expression(self) -> None:
        with pytest.raises(RuleViolation, match="longer than"):
            calculate("1+" * MAX_EXPRESSION_LENGTH + "1")

    def test_deep_nesting(self) -> None:
        with pytest.raises(RuleViolation, match="nested too deeply"):
            calculate("(" * 200 + "1" + ")" * 200)

    def test_huge_result(self) -> None:
        with pytest.raises(RuleViolation, match="too large"):
            calculate("9" * 20 + " * " + "9" * 20)
