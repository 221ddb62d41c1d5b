"""A small arithmetic evaluator for + - * / and parentheses, on decimals. Never `eval`."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Decimal, DivisionByZero, InvalidOperation, Overflow
from decimal import localcontext as decimal_context

from app.domain.errors import RuleViolation
from app.domain.models import CENT

MAX_EXPRESSION_LENGTH = 1000
MAX_NESTING = 100
MAX_MAGNITUDE = Decimal(10) ** 24
_ALLOWED = re.compile(r"[0-9+\-*/(). ]*")
_OPERATIONS: dict[str, Callable[[Decimal, Decimal], Decimal]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|(.))")


def calculate(expression: str) -> Decimal:
    """Evaluate and round to the cent (half-even, as tau-bench's `round(x, 2)`)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise RuleViolation(f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters.")
    if not _ALLOWED.fullmatch(expression):
        raise RuleViolation("invalid characters in expression; use digits, + - * / ( ) . only.")
    with decimal_context() as ctx:
        ctx.prec = 28
        ctx.traps[DivisionByZero] = True
        ctx.traps[InvalidOperation] = True
        ctx.traps[Overflow] = True
        try:
            value = _Parser(_tokens(expression)).parse()
            if abs(value) >= MAX_MAGNITUDE:
                raise RuleViolation("the result is too large.")
            return value.quantize(CENT, rounding=ROUND_HALF_EVEN)
        except (DivisionByZero, InvalidOperation) as exc:
            if _is_division_by_zero(exc):
                raise RuleViolation("division by zero.") from None
            raise RuleViolation("the result cannot be computed.") from None
        except Overflow:
            raise RuleViolation("the result is too large.") from None


def calculation_text(value: Decimal) -> str:
    """Render like Python's str(float): `4.0`, `3.3`, `1463.71`."""
    text = f"{value:f}"
    if "." in text:
        text = text.rstrip("0")
        if text.endswith("."):
            text += "0"
    else:
        text += ".0"
    return text


def _is_division_by_zero(exc: ArithmeticError) -> bool:
    # 0/0 raises InvalidOperation (DivisionUndefined); x/0 raises DivisionByZero.
    return isinstance(exc, DivisionByZero) or "DivisionUndefined" in repr(exc.args)


def _tokens(expression: str) -> list[str]:
    tokens = [number or symbol for number, symbol in _TOKEN.findall(expression)]
    return [t for t in tokens if t.strip()]


class _Parser:
    """expr := term (('+'|'-') term)* ; term := unary (('*'|'/') unary)* ;
    unary := ('+'|'-') unary | number | '(' expr ')'"""

    def __init__(self, tokens: list[str]) -> None:
        self._tokens = tokens
        self._pos = 0
        self._depth = 0

    def parse(self) -> Decimal:
        if not self._tokens:
            raise RuleViolation("the expression is empty.")
        value = self._expr()
        if self._pos != len(self._tokens):
            raise RuleViolation("invalid expression; check the operators and parentheses.")
        return value

    def _peek(self) -> str | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise RuleViolation("invalid expression; it ends too early.")
        self._pos += 1
        return token

    def _expr(self) -> Decimal:
        value = self._term()
        while self._peek() in ("+", "-"):
            operation = _OPERATIONS[self._take()]
            value = operation(value, self._term())
        return value

    def _term(self) -> Decimal:
        value = self._unary()
        while self._peek() in ("*", "/"):
            operation = _OPERATIONS[self._take()]
            value = operation(value, self._unary())
        return value

    def _unary(self) -> Decimal:
        self._depth += 1
        if self._depth > MAX_NESTING:
            raise RuleViolation("the expression is nested too deeply.")
        try:
            token = self._take()
            if token == "+":
                return +self._unary()
            if token == "-":
                return -self._unary()
            if token == "(":
                value = self._expr()
                if self._take() != ")":
                    raise RuleViolation("invalid expression; a parenthesis is not closed.")
                return value
            if token[0].isdigit() or token[0] == ".":
                return Decimal(token)
            raise RuleViolation("invalid expression; check the operators and parentheses.")
        finally:
            self._depth -= 1
