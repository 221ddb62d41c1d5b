"""What the compatible surface refuses, and why, as typed 422s."""

from __future__ import annotations

from typing import NoReturn

from app.errors import AppError


def refuse(message: str, code: str) -> NoReturn:
    raise AppError(message, code=code, status_code=422)
