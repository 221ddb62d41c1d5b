"""`one_round_trip`: a transaction's statements, BEGIN and COMMIT in one pipeline sync."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from app.db.trips import one_round_trip


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    # prepare_threshold=0: every statement is prepared, as the pool's are after a few uses
    async with await psycopg.AsyncConnection.connect(
        database_url, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        await conn.execute("CREATE TEMP TABLE trip (n int)")
        yield conn


def count_syncs(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Every wait for the server that ends in a Sync or a flush request: a round trip each,
    with the statements queued before it (as benchmarks/roundtrips.py counts them)."""
    syncs = [0]
    wait = conn.wait

    async def counting(gen: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(gen, "__name__", "")
        frame = getattr(gen, "gi_frame", None)
        flush = name == "_fetch_gen" and bool(frame and frame.f_locals.get("flush"))
        syncs[0] += name in ("_sync_gen", "_exit_gen") or flush
        return await wait(gen, *args, **kwargs)

    conn.wait = counting  # type: ignore[method-assign]
    return syncs


async def rows(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    cur = await conn.execute("SELECT n FROM trip ORDER BY n")
    return [r["n"] for r in await cur.fetchall()]


async def test_statements_and_a_result_read_after_take_one_sync(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    # psycopg's transaction() in a pipeline syncs four times here (after BEGIN, at its
    # end, leaving its own pipeline block, at the pipeline's end)
    syncs = count_syncs(conn)
    async with conn.cursor() as cur, conn.cursor() as last:
        async with one_round_trip(conn):
            await cur.executemany("INSERT INTO trip VALUES (%s)", [(1,), (2,)])
            await last.execute("SELECT count(*) AS n FROM trip")
        assert await last.fetchone() == {"n": 2}
    assert syncs == [1]
    assert await rows(conn) == [1, 2]
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE


async def test_an_error_commits_nothing_and_hands_back_a_clean_connection(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    insert = "INSERT INTO trip VALUES (%s)"
    with pytest.raises(psycopg.errors.UndefinedTable):  # the error itself, not "aborted"
        async with one_round_trip(conn):
            await conn.execute(insert, (1,))
            await conn.execute("SELECT * FROM no_such_table")
            await conn.execute(insert, (2,))  # skipped: the pipeline is aborted
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert await rows(conn) == []
    # the statement skipped in the aborted pipeline is not believed prepared
    async with one_round_trip(conn):
        await conn.execute(insert, (3,))
    assert await rows(conn) == [3]
