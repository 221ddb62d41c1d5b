"""The async psycopg pools. Created by the lifespan or the CLI, never at import time.

A database blip (a restart, or its backends terminated) kills every pooled connection at
once, and psycopg_pool notices a dead one only when it is used: the next request fails.
`ServicePool` keeps a blip from reaching requests once the database is back:

- every checkout is checked first (`looks_alive`; an empty query only when the socket has
  something to read). The first dead connection found makes the pool check all its idle
  ones, so the dead siblings are replaced together instead of being handed out one by one
  (a checkout that meets a second dead one backs off 1 s, then 2 s, ...);
- a failed reconnection gives up after `RECONNECT_GIVE_UP_S`, so the next checkout starts
  a fresh attempt instead of waiting out an exponential backoff that grows to minutes;
- a checkout that has waited `OUTAGE_CHECK_S` asks the database directly (one connection
  attempt, shared by concurrent callers). Unreachable: it fails now, and so does every
  checkout after it, each after one such attempt, until one succeeds. Reachable (every
  connection is just busy): it waits on, up to DB_POOL_TIMEOUT_S.

A failed checkout raises `PoolTimeout` (a psycopg `OperationalError`), which an API request
answers with 503 `database_unavailable` (app/errors.py).

A connection can also go silent: a NAT or load balancer drops its state, or PgBouncer
stalls, and nothing ever answers or closes it. Nothing in psycopg would stop waiting, and
the kernel cannot tell when whatever is in the middle acknowledges every byte, so each use
of a pooled connection has a deadline (`DB_CALL_DEADLINE_S`): a use still going then has
its socket shut down, which fails the wait at once with an `OperationalError` (no cancel
request: that would go the same silent way) and the pool replaces the connection. The
health checks have a deadline of their own. libpq's connect timeout, TCP keepalives and
TCP_USER_TIMEOUT cover the silences the kernel can see (docs/chaos.md, "Network faults").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import structlog
from psycopg import AsyncConnection
from psycopg.pq import ConnStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.config import Settings

log = structlog.get_logger(__name__)

# How long the pool's background attempts to replace a lost connection go on before giving
# up; the next checkout then starts a new attempt. Its attempts are 1 s, then 2 s, 4 s, ...
# apart, so this bounds how late after the database's return the pool reconnects.
RECONNECT_GIVE_UP_S = 2.0
# A checkout waits this long before it asks whether the database is there at all.
OUTAGE_CHECK_S = 0.5
# The direct connection that tells "unreachable" from "every connection busy".
PROBE_CONNECT_TIMEOUT_S = 2
# An empty query (a health check) or a connection's set-up statement on a healthy server
# takes a millisecond; one that has not answered in this long is on a silent connection.
CHECK_DEADLINE_S = 5.0


def sqlalchemy_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def looks_alive(conn: AsyncConnection[Any]) -> bool:
    """True when an idle connection's socket has nothing to read, without a round trip.

    A server that ends a session (a restart, pg_terminate_backend) sends its FATAL error and
    closes the socket, which makes it readable. So does a notice or a notification sent
    unasked; either way the full check (an empty query) decides. That round trip cost about
    as much as the request's own first query (0.7 ms here); this poll costs microseconds.
    """
    if conn.closed or conn.pgconn.status != ConnStatus.OK:
        return False
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
    return not poller.poll(0)


def cut(conn: AsyncConnection[Any], reason: str) -> None:
    """Shut the connection's socket down under whatever waits on it: the wait ends with
    "server closed the connection unexpectedly", and the pool throws the connection away."""
    if conn.closed:
        return
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:  # no socket any more
        return
    log.warning("database connection cut: no answer in time", reason=reason)
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)  # the socket itself, shared by the dup


@asynccontextmanager
async def cut_after(
    conn: AsyncConnection[Any], seconds: float | None, reason: str
) -> AsyncIterator[None]:
    """`cut` the connection if the block has not ended in `seconds` (None: no deadline)."""
    if seconds is None:
        yield
        return
    timer = asyncio.get_running_loop().call_later(seconds, cut, conn, reason)
    try:
        yield
    finally:
        timer.cancel()


class ServicePool(AsyncConnectionPool[AsyncConnection[Any]]):
    """An `AsyncConnectionPool` that outlives database blips (see the module docstring)."""

    def __init__(self, url: str, *, call_deadline_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(url, check=self._check_or_sweep, **kwargs)
        self.call_deadline_s = call_deadline_s
        self._url = url
        self.unreachable_since: float | None = None  # monotonic time, None while reachable
        self._probe: asyncio.Future[bool] | None = None
        self._reachable_at = -1.0  # when a probe last succeeded (monotonic)

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[Any]:  # noqa: ASYNC109 (the base class's API)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            if self.unreachable_since is not None and not await self.database_reachable():
                raise PoolTimeout("the database is unreachable")
            left = deadline - time.monotonic()
            try:
                return await super().getconn(min(left, OUTAGE_CHECK_S))
            except PoolTimeout:
                if not await self.database_reachable():
                    self._mark_unreachable()
                    raise
                if time.monotonic() >= deadline:  # every connection busy for too long
                    raise

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConnection[Any]]:  # noqa: ASYNC109 (the base class's API)
        async with (
            super().connection(timeout) as conn,
            cut_after(conn, self.call_deadline_s, "DB_CALL_DEADLINE_S"),
        ):
            yield conn

    @staticmethod
    async def check_connection(conn: AsyncConnection[Any]) -> None:
        # Also what `check()` runs on every idle connection: one silent one would hold the
        # sweep, and every connection it took out of the pool, for ever.
        async with cut_after(conn, CHECK_DEADLINE_S, "health check"):
            await AsyncConnectionPool.check_connection(conn)

    async def database_reachable(self) -> bool:
        """Whether a direct connection (outside the pool) succeeds. One attempt at a time,
        shared; a success holds for `OUTAGE_CHECK_S` (a busy pool asks again and again), a
        failure for nobody (the next checkout after the database's return must not fail)."""
        if time.monotonic() - self._reachable_at < OUTAGE_CHECK_S:
            return True
        if self._probe is None:
            self._probe = asyncio.ensure_future(self._connect_once())
            self._probe.add_done_callback(self._probe_done)
        return await asyncio.shield(self._probe)

    async def _connect_once(self) -> bool:
        try:
            conn = await AsyncConnection.connect(
                self._url, connect_timeout=PROBE_CONNECT_TIMEOUT_S, autocommit=True
            )
        except psycopg.OperationalError:
            return False
        await conn.close()
        self._reachable_at = time.monotonic()
        if self.unreachable_since is not None:
            down_s = round(self._reachable_at - self.unreachable_since, 1)
            log.warning("database reachable again", pool=self.name, down_s=down_s)
            self.unreachable_since = None
        return True

    def _probe_done(self, _: asyncio.Future[bool]) -> None:
        self._probe = None

    def _mark_unreachable(self) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            log.warning("database unreachable; checkouts fail until it is back", pool=self.name)

    async def _check_or_sweep(self, conn: AsyncConnection[Any]) -> None:
        if looks_alive(conn):
            return
        try:
            await self.check_connection(conn)
        except Exception:
            # The server restarted or cut its backends off: the idle siblings of this
            # connection are most likely dead too. Check (and replace) them all now.
            log.warning("dead pooled connection; checking the idle ones", pool=self.name)
            await self.check()
            raise


async def generic_plans(conn: AsyncConnection[Any]) -> None:
    """Prepared statements run their generic plan, without planning each call again.

    Postgres plans a prepared statement for its parameters on each of its first five runs,
    and goes on doing so whenever the generic plan's estimate is higher than the custom
    plans' average, which it was for most of a turn's statements here (the run's closing
    statement, the preferences read, the order lookups): a third of the database's time
    for a read turn was planning (0.9 of 2.6 ms, pg_stat_statements with track_planning).
    A turn's statements look rows up by key, where the generic plan is the same plan; a
    statement whose best plan depends on its values (the analytics report's time range) is
    run unprepared, so it is planned for them. Set once per connection, not per statement;
    only with prepared statements on, the mode PgBouncer in transaction mode cannot use
    anyway.
    """
    async with cut_after(conn, CHECK_DEADLINE_S, "connection set-up"):
        await conn.execute("SET plan_cache_mode = force_generic_plan")


def network_settings(settings: Settings) -> dict[str, Any]:
    """libpq's connection parameters for a peer that is gone without a word: how long a
    connection attempt may take, keepalives on an idle connection, and how long sent data
    may go unacknowledged."""
    return {
        "connect_timeout": settings.db_connect_timeout_s,
        "keepalives": 1,
        "keepalives_idle": settings.db_keepalives_idle_s,
        "keepalives_interval": settings.db_keepalives_interval_s,
        "keepalives_count": settings.db_keepalives_count,
        "tcp_user_timeout": settings.db_tcp_user_timeout_ms,
    }


async def open_pool(url: str, settings: Settings, *, name: str) -> ServicePool:
    """Open an autocommit pool of dict-row connections.

    Autocommit because the checkpointer expects it, and because every write path opens its
    own explicit transaction (`conn.transaction()`, or BEGIN and COMMIT in a pipeline:
    app/db/trips.py).
    """
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "row_factory": dict_row,
        "prepare_threshold": settings.db_prepare_threshold,
        **network_settings(settings),
    }
    prepared = settings.db_prepare_threshold is not None
    pool = ServicePool(
        url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        kwargs=kwargs,
        configure=generic_plans if prepared else None,
        name=name,
        timeout=settings.db_pool_timeout_s,
        reconnect_timeout=RECONNECT_GIVE_UP_S,
        call_deadline_s=settings.db_call_deadline_s,
        open=False,
    )
    await pool.open(wait=True, timeout=30)
    return pool
