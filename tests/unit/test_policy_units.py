"""The pieces of issue 42 that need no I/O: a version's rules as the prompt carries them,
the identity line's place, the share bucket, and the admin role's tokens."""

from __future__ import annotations

import pytest

from app.agent.prompts import POLICY
from app.api.auth import issue_token, verify_token
from app.errors import Unauthorized
from app.policies.render import PROCEDURES_HEADING, rules_text, with_identity
from app.policies.store import bucket

SECRET = "unit-test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


class TestRules:
    def test_without_procedures_the_rules_are_the_instructions_byte_for_byte(self) -> None:
        assert rules_text(POLICY, []) is POLICY

    def test_procedures_follow_the_instructions_in_order(self) -> None:
        text = rules_text(
            "Be kind.",
            [
                {"name": "Damaged", "when": "it broke", "steps": "1. Sorry.\n2. Replace.\n"},
                {"name": "Late", "when": "it is late", "steps": "Check the tracking."},
            ],
        )
        assert text == (
            f"Be kind.\n{PROCEDURES_HEADING}\n### Damaged\nWhen: it broke\n1. Sorry.\n2. Replace."
            "\n### Late\nWhen: it is late\nCheck the tracking."
        )

    def test_the_identity_line_goes_at_its_mark_or_after_the_rules(self) -> None:
        assert with_identity("Verify first. {identity}\nMore.", "ID") == "Verify first. ID\nMore."
        assert with_identity("No mark here.", "ID") == "No mark here.\nID"
        assert with_identity(POLICY, "ID") == POLICY.format(identity="ID")


class TestBucket:
    def test_buckets_are_stable_and_spread(self) -> None:
        buckets = [bucket(f"u:{i}") for i in range(1000)]
        assert buckets == [bucket(f"u:{i}") for i in range(1000)]
        assert all(0 <= b < 100 for b in buckets)
        assert 400 < sum(b < 50 for b in buckets) < 600


class TestAdminTokens:
    def test_an_admin_is_a_staff_id_with_role_admin_and_keeps_its_name(self) -> None:
        principal = verify_token(
            SECRET, issue_token(SECRET, "staff-lead", role="admin", name="Lee")
        )
        assert principal.role == "admin" and principal.display_name == "Lee"

    def test_a_customer_or_guest_id_cannot_be_an_admin(self) -> None:
        for user in ("noah_brown_6181", "guest-abc"):
            with pytest.raises(ValueError):
                issue_token(SECRET, user, role="admin")

    def test_a_forged_admin_claim_on_a_customer_id_is_refused(self) -> None:
        import time

        import jwt

        token = jwt.encode(
            {"sub": "noah_brown_6181", "role": "admin", "exp": int(time.time()) + 600},
            SECRET,
            algorithm="HS256",
        )
        with pytest.raises(Unauthorized, match="does not match its role"):
            verify_token(SECRET, token)
