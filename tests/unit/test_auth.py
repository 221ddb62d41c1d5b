"""Bearer tokens: what a correctly signed token must still hold to be accepted."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest

from app.api.auth import MAX_TOKEN_TTL_S, VerifiedTokens, issue_token, verify_token
from app.errors import Unauthorized

SECRET = "unit-test-secret-of-at-least-32-characters"
NOAH = "noah_brown_6181"


def signed(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, SECRET, algorithm="HS256")


def signed_raw(payload: str) -> str:
    """A token over a payload written by hand (JSON that `jwt.encode` would not write)."""
    return jwt.api_jws.encode(payload.encode(), SECRET, algorithm="HS256")


def in_an_hour() -> int:
    return int(time.time()) + 3600


class TestAcceptedTokens:
    def test_an_issued_token_verifies(self) -> None:
        principal = verify_token(SECRET, issue_token(SECRET, NOAH))
        assert (principal.user_id, principal.role) == (NOAH, "customer")

    def test_a_guest_token_verifies(self) -> None:
        principal = verify_token(SECRET, issue_token(SECRET, "guest-abc", role="guest"))
        assert principal.role == "guest"

    def test_a_float_exp_within_the_cap_is_accepted(self) -> None:
        token = signed({"sub": NOAH, "role": "customer", "exp": time.time() + 60.5})
        assert verify_token(SECRET, token).user_id == NOAH

    def test_the_longest_lifetime_is_accepted(self) -> None:
        token = issue_token(SECRET, NOAH, ttl_s=MAX_TOKEN_TTL_S)
        assert verify_token(SECRET, token).user_id == NOAH


class TestRefusedClaims:
    @pytest.mark.parametrize(
        "exp",
        [str(in_an_hour()), "never", True, None, [in_an_hour()], {"t": 1}],
        ids=["numeric-string", "word", "bool", "null", "list", "object"],
    )
    def test_exp_must_be_a_number(self, exp: object) -> None:
        with pytest.raises(Unauthorized):
            verify_token(SECRET, signed({"sub": NOAH, "role": "customer", "exp": exp}))

    @pytest.mark.parametrize("exp", ["1e300", "Infinity", "NaN", "-Infinity"])
    def test_a_huge_or_non_finite_exp_is_refused(self, exp: str) -> None:
        payload = f'{{"sub": {json.dumps(NOAH)}, "role": "customer", "exp": {exp}}}'
        with pytest.raises(Unauthorized):
            verify_token(SECRET, signed_raw(payload))

    def test_an_exp_past_the_longest_lifetime_is_refused(self) -> None:
        exp = int(time.time()) + MAX_TOKEN_TTL_S + 3600
        with pytest.raises(Unauthorized, match="lifetime"):
            verify_token(SECRET, signed({"sub": NOAH, "role": "customer", "exp": exp}))

    def test_a_missing_role_is_refused_not_taken_for_customer(self) -> None:
        with pytest.raises(Unauthorized):
            verify_token(SECRET, signed({"sub": NOAH, "exp": in_an_hour()}))

    def test_a_missing_exp_is_refused(self) -> None:
        with pytest.raises(Unauthorized):
            verify_token(SECRET, signed({"sub": NOAH, "role": "customer"}))

    def test_an_expired_token_is_refused(self) -> None:
        with pytest.raises(Unauthorized, match="expired"):
            verify_token(SECRET, issue_token(SECRET, NOAH, ttl_s=-10))


class TestIssuing:
    def test_a_lifetime_past_the_cap_cannot_be_issued(self) -> None:
        with pytest.raises(ValueError, match="lifetime"):
            issue_token(SECRET, NOAH, ttl_s=MAX_TOKEN_TTL_S + 1)


class TestVerifiedTokens:
    """The per-process cache of verified tokens accepts exactly what verify_token accepts."""

    def test_a_cached_token_gives_the_same_principal(self) -> None:
        tokens = VerifiedTokens(SECRET)
        token = issue_token(SECRET, "staff-ann", role="staff", name="Ann")
        assert tokens.verify(token) == tokens.verify(token) == verify_token(SECRET, token)

    def test_a_token_differing_only_in_its_signature_is_refused(self) -> None:
        tokens = VerifiedTokens(SECRET)
        token = issue_token(SECRET, NOAH)
        tokens.verify(token)
        head, payload, signature = token.split(".")
        # a character in the middle: the last one carries padding bits a decoder may ignore
        flipped = "B" if signature[10] == "A" else "A"
        forged = ".".join([head, payload, signature[:10] + flipped + signature[11:]])
        with pytest.raises(Unauthorized):
            tokens.verify(forged)
        other = issue_token("another-secret-of-at-least-32-characters", NOAH)
        with pytest.raises(Unauthorized):
            tokens.verify(other)

    def test_a_cached_token_is_refused_once_it_expires(self) -> None:
        tokens = VerifiedTokens(SECRET)
        exp = int(time.time()) + 1
        token = signed({"sub": NOAH, "role": "customer", "exp": exp})
        assert tokens.verify(token).user_id == NOAH
        time.sleep(max(0.0, exp - time.time()) + 0.05)
        with pytest.raises(Unauthorized, match="expired"):
            tokens.verify(token)
        assert token not in tokens._seen

    def test_a_refused_token_is_not_kept(self) -> None:
        tokens = VerifiedTokens(SECRET)
        with pytest.raises(Unauthorized):
            tokens.verify("not.a.token")
        with pytest.raises(Unauthorized):
            tokens.verify("not.a.token")
        assert len(tokens._seen) == 0

    def test_it_keeps_at_most_its_size_newest_first(self) -> None:
        tokens = VerifiedTokens(SECRET, size=3)
        issued = [issue_token(SECRET, f"cust_{i}") for i in range(5)]
        for token in issued:
            tokens.verify(token)
        assert list(tokens._seen) == issued[2:]
