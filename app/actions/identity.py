"""`X-Customer-Token`: who the call is for, signed for one source. A short-lived HS256 JWT
with the source's own secret, so the server can trust the customer id without trusting the
model, and a token meant for one source is refused by another (`aud`). The customer's own
bearer token is never forwarded."""

from __future__ import annotations

import time
import uuid

import jwt

TOKEN_TTL_S = 300  # at most five minutes, as the issue asks


def customer_token(secret: str, source: str, customer_id: str, now: float | None = None) -> str:
    issued = int(time.time() if now is None else now)
    claims = {
        "sub": customer_id,
        "aud": source,
        "iat": issued,
        "exp": issued + TOKEN_TTL_S,
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(claims, secret, algorithm="HS256")
