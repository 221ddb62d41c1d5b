"""Rate limits and the daily model-token budget, held in Postgres across replicas.

Each limit is a GCRA (generic cell rate algorithm) over one row of `rate_limits`: `burst`
requests at once, then one per emission interval. One UPSERT decides and records a request,
so a check is a single round trip, and every replica sees the same counts. A post's rate and
the day's token budget are checked by the statement that opens its run (app/runs/limits.py).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.background import TaskSet
from app.config import Settings
from app.errors import RateLimited
from app.metrics import Metrics
from app.runs.limits import POSTS, Limit, limit

log = structlog.get_logger(__name__)

# Idle rows (their tat is past) are dropped every so many checks of a process.
PURGE_EVERY = 5000

# The one GCRA (app/db/sql/10_limits.sql): `ahead_s` on a refusal, how far the key's tat
# lies ahead of now.
CHECK_SQL = "SELECT allowed, ahead_s FROM cs_gcra(%(key)s, %(interval_s)s, %(window_s)s)"
PURGE_SQL = "DELETE FROM rate_limits WHERE tat < now()"

MESSAGES = {
    "posts": POSTS,
    "threads": "too many new conversations; try again later",
    "public": "too many requests from this address; slow down",
    "auth": "too many sign-in attempts from this address; try again later",
}


def limits_from(settings: Settings) -> dict[str, Limit | None]:
    return {
        "posts": limit(
            "posts", settings.rate_limit_posts_per_minute, 60, settings.rate_limit_posts_burst
        ),
        "threads": limit(
            "threads",
            settings.rate_limit_threads_per_hour,
            3600,
            settings.rate_limit_threads_burst,
        ),
        "public": limit(
            "public", settings.rate_limit_public_per_minute, 60, settings.rate_limit_public_burst
        ),
        "auth": limit(
            "auth", settings.rate_limit_auth_per_minute, 60, settings.rate_limit_auth_burst
        ),
    }


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(text: str) -> tuple[Network, ...]:
    return tuple(
        ipaddress.ip_network(p.strip(), strict=False) for p in text.split(",") if p.strip()
    )


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_ip(peer: str | None, forwarded_for: str | None, trusted: tuple[Network, ...]) -> str:
    """The client's address: the TCP peer, unless the peer is a trusted proxy; then the
    nearest address in X-Forwarded-For that is not a trusted proxy (read right to left,
    since a client can put anything on the left)."""
    address = _address(peer or "")
    if address is None:
        return peer or "unknown"
    if forwarded_for and trusted and any(address in n for n in trusted):
        for hop in reversed(forwarded_for.split(",")):
            forwarded = _address(hop)
            if forwarded is None:
                break
            address = forwarded
            if not any(address in n for n in trusted):
                break
    return str(address)


def ip_key(ip: str) -> str:
    """IPv6 clients are counted per /64: one host is usually handed a whole /64."""
    address = _address(ip)
    if not isinstance(address, ipaddress.IPv6Address):
        return ip
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))


class RateLimiter:
    def __init__(
        self, pool: AsyncConnectionPool[Any], settings: Settings, metrics: Metrics
    ) -> None:
        self.pool = pool
        self.metrics = metrics
        self.limits = limits_from(settings)
        self.trusted = trusted_networks(settings.trusted_proxies)
        self._checks = 0
        self._purges = TaskSet()

    def client_key(self, peer: str | None, forwarded_for: str | None) -> str:
        return ip_key(client_ip(peer, forwarded_for, self.trusted))

    async def check(self, name: str, subject: str) -> None:
        """Count one request of `subject` against limit `name`; RateLimited when over it."""
        limit = self.limits[name]
        if limit is not None:
            row = await self._run(CHECK_SQL, limit, subject)
            self._refuse_if_over(limit, row)

    async def _run(self, sql: str, limit: Limit, subject: str) -> dict[str, Any]:
        params = {
            "key": f"{limit.name}:{subject}",
            "interval_s": limit.interval_s,
            "window_s": limit.window_s,
        }
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            row: dict[str, Any] | None = await cur.fetchone()
        assert row is not None
        self._maybe_purge()
        return row

    def _refuse_if_over(self, limit: Limit, row: dict[str, Any]) -> None:
        if row["allowed"]:
            return
        self.metrics.add("cs_agent_rate_limited_total", limit=limit.name)
        retry_after_s = limit.retry_after_s(row["ahead_s"] or 0.0)
        raise RateLimited(MESSAGES[limit.name], retry_after_s=retry_after_s)

    def _maybe_purge(self) -> None:
        self._checks += 1
        if self._checks % PURGE_EVERY:
            return
        self._purges.spawn(self._purge(), "rate limit purge")

    async def _purge(self) -> None:
        try:
            async with self.pool.connection() as conn:
                await conn.execute(PURGE_SQL)
        except Exception:  # a missed purge only leaves idle rows for the next one
            log.warning("rate limit purge failed", exc_info=True)
