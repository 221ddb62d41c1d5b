"""Page cursors: `<microseconds since the epoch>~<key>`, the position after which the next
page starts. The pattern is stated in the OpenAPI document and every string it matches is
a position (any time, any well-formed key), so a client or a fuzzer can tell a valid
cursor from the document alone; one it did not get from us merely starts elsewhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import Query

from app.errors import AppError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS = "(0|[1-9][0-9]{0,16})"  # up to the year 5138: always a datetime
SESSION_KEY = "[A-Za-z0-9_-]{1,64}"
THREAD_KEY = "[A-Za-z0-9_.@-]{1,128}:" + SESSION_KEY  # a full thread id, user:session
THREADS_CURSOR = f"^{_MICROS}~{SESSION_KEY}$"
STAFF_CURSOR = f"^{_MICROS}~{THREAD_KEY}$"


def cursor_of(at: datetime, key: str) -> str:
    micros = (at - EPOCH) // timedelta(microseconds=1)
    return f"{max(0, micros)}~{key}"


def position_of(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; a typed 422 for one past the route's pattern (which
    the route's Query checks first, so this is the last line, not the first)."""
    micros, sep, key = cursor.partition("~")
    if not sep or not micros.isdigit() or not key:
        raise AppError("cursor is not valid", code="invalid_cursor", status_code=422)
    return EPOCH + timedelta(microseconds=int(micros)), key


def cursor_query(pattern: str) -> object:
    return Query(
        pattern=pattern,
        max_length=220,
        description="`next_cursor` of the previous page: `<microseconds>~<key>`.",
    )


ThreadsCursor = Annotated[str | None, cursor_query(THREADS_CURSOR)]
StaffCursor = Annotated[str | None, cursor_query(STAFF_CURSOR)]
