"""Checkpointer thread ids: `{user_id}:{session_id}`, both parts validated."""

from __future__ import annotations

import re

from app.identity import USER_ID_RE

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class InvalidThreadId(ValueError):
    pass


def thread_id(user_id: str, session_id: str) -> str:
    """Join the parts. Neither may contain ':', so two pairs never map to one id."""
    if not USER_ID_RE.fullmatch(user_id):
        raise InvalidThreadId("user id must be 1-128 characters of A-Z a-z 0-9 _ . @ -")
    if not SESSION_ID_RE.fullmatch(session_id):
        raise InvalidThreadId("session id must be 1-64 characters of A-Z a-z 0-9 _ -")
    return f"{user_id}:{session_id}"
