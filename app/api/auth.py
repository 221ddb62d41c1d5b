"""Bearer JWTs (HS256): issue and verify. Identity for every route comes from here."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import jwt

from app.errors import Unauthorized
from app.identity import (
    GUEST_PREFIX,
    ROLES,
    STAFF_PREFIX,
    STAFF_ROLES,
    USER_ID_RE,
    Principal,
    Role,
    subject_matches_role,
)

ALGORITHM = "HS256"
# The longest lifetime a token may have: issue_token refuses more, and verify_token refuses a
# token whose `exp` lies further ahead (a signed `exp: 1e300` must not mean "never").
MAX_TOKEN_TTL_S = 30 * 24 * 3600
MAX_NAME_CHARS = 80


def issue_token(
    secret: str,
    user_id: str,
    *,
    role: Role = "customer",
    ttl_s: int = 3600,
    name: str | None = None,
) -> str:
    if not USER_ID_RE.fullmatch(user_id):
        raise ValueError("user id must be 1-128 characters of A-Z a-z 0-9 _ . @ -")
    if not subject_matches_role(user_id, role):
        raise ValueError(
            f"guest ids (and only guest ids) start with {GUEST_PREFIX!r}, "
            f"staff ids (and only staff ids) with {STAFF_PREFIX!r}"
        )
    if ttl_s > MAX_TOKEN_TTL_S:
        raise ValueError(f"a token's lifetime is at most {MAX_TOKEN_TTL_S} seconds (30 days)")
    now = int(time.time())
    claims: dict[str, object] = {"sub": user_id, "role": role, "iat": now, "exp": now + ttl_s}
    if name:
        claims["name"] = name[:MAX_NAME_CHARS]
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str) -> Principal:
    return _verify(secret, token)[0]


class VerifiedTokens:
    """The tokens this process has verified lately, each with its principal and `exp`.

    A customer sends the same token with every message, and checking its signature and
    claims again costs ~40 us on the route every turn takes. An entry is keyed by the whole
    token string, so a token that differs in any byte, its signature included, is verified
    afresh; it is used only before its `exp`, as PyJWT would; and only tokens that passed are
    kept, at most `size` of them (the oldest go first). The secret is fixed for the process:
    a changed JWT_SECRET takes a restart, which empties this.
    """

    def __init__(self, secret: str, size: int = 4096, clock: Callable[[], float] = time.time):
        self._secret = secret
        self._size = size
        self._clock = clock
        self._seen: dict[str, tuple[Principal, float]] = {}

    def verify(self, token: str) -> Principal:
        seen = self._seen.get(token)
        if seen is not None:
            if self._clock() < seen[1]:
                return seen[0]
            del self._seen[token]
        principal, exp = _verify(self._secret, token)
        if len(self._seen) >= self._size:
            del self._seen[next(iter(self._seen))]
        self._seen[token] = (principal, exp)
        return principal


def _verify(secret: str, token: str) -> tuple[Principal, float]:
    try:
        claims = jwt.decode(
            token, secret, algorithms=[ALGORITHM], options={"require": ["sub", "role", "exp"]}
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("the token has expired") from None
    except jwt.PyJWTError:
        raise Unauthorized("the token is malformed or badly signed") from None
    _check_expiry(claims["exp"])
    sub = claims["sub"]
    role = claims["role"]
    if not isinstance(sub, str) or not USER_ID_RE.fullmatch(sub):
        raise Unauthorized("the token's subject is not a valid user id")
    if role not in ROLES:
        raise Unauthorized("the token's role must be customer, guest, staff or admin")
    if not subject_matches_role(sub, role):
        raise Unauthorized("the token's subject does not match its role")
    name = claims.get("name")
    if role not in STAFF_ROLES or not isinstance(name, str) or not name.strip():
        name = None
    principal = Principal(user_id=sub, role=role, name=name[:MAX_NAME_CHARS] if name else None)
    return principal, float(claims["exp"])


def _check_expiry(exp: object) -> None:
    # PyJWT takes anything int() accepts: "1700000000", True, 1e300.
    if isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp):
        raise Unauthorized("the token's exp must be a number of seconds since the epoch")
    if exp > time.time() + MAX_TOKEN_TTL_S + 60:  # a minute's grace for the issuer's clock
        raise Unauthorized("the token's lifetime is longer than the service accepts")


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized()
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("use 'Authorization: Bearer <token>'")
    return token.strip()
