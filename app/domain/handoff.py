"""The summary a human agent reads when a conversation is handed over."""

from __future__ import annotations

from app.domain.errors import RuleViolation

MAX_SUMMARY_LENGTH = 2000


def handoff_summary(summary: str) -> str:
    text = summary.strip()
    if not text:
        raise RuleViolation("summary must describe the customer's issue for the human agent.")
    if len(text) > MAX_SUMMARY_LENGTH:
        raise RuleViolation(f"summary must be at most {MAX_SUMMARY_LENGTH} characters.")
    return text
