from __future__ import annotations

import pytest

from app.domain.errors import RuleViolation
from app.domain.handoff import MAX_SUMMARY_LENGTH, handoff_summary


class TestHandoffSummary:
    def test_summary_is_trimmed(self) -> None:
        assert handoff_summary("  wants a refund for #W1  ") == "wants a refund for #W1"

    def test_blank_summary_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="must describe"):
            handoff_summary("   ")

    def test_overlong_summary_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="at most"):
            handoff_summary("x" * (MAX_SUMMARY_LENGTH + 1))
