"""`read_snapshot`: the read tools' consistent, read-only view.

It runs in pipeline mode, and `get_order` issues its four SELECTs before reading any, so a
lookup is 2 round trips instead of 7 (timed in benchmarks/FINDINGS.md); these tests check
that the batching changed nothing a reader can see."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from app.db.repository import ShopRepository
from app.tools.snapshot import read_snapshot
from tests import factories as f

ORDER = "#W0000001"


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await f.seed(
        db, customers=(f.customer(),), products=(f.bottle(), f.lamp()), orders=(f.order(ORDER),)
    )
    return db


async def test_a_snapshot_is_read_only_and_repeatable_read(shop: AsyncConnectionPool[Any]) -> None:
    async with read_snapshot(shop) as conn:
        cur = await conn.execute(
            "SELECT current_setting('transaction_isolation') AS iso,"
            " current_setting('transaction_read_only') AS ro"
        )
        assert await cur.fetchone() == {"iso": "repeatable read", "ro": "on"}


async def test_an_order_is_read_as_of_one_moment(shop: AsyncConnectionPool[Any]) -> None:
    async with read_snapshot(shop) as conn:
        first = await ShopRepository(conn).get_order(ORDER)
        async with shop.connection() as other:  # a write commits meanwhile
            await other.execute("DELETE FROM order_items WHERE order_id = %s", (ORDER,))
        again = await ShopRepository(conn).get_order(ORDER)
    assert first is not None and first.items
    assert again == first
    async with read_snapshot(shop) as conn:
        after = await ShopRepository(conn).get_order(ORDER)
    assert after is not None and after.items == ()


async def test_a_missing_order_is_none(shop: AsyncConnectionPool[Any]) -> None:
    async with read_snapshot(shop) as conn:
        assert await ShopRepository(conn).get_order("#W9999999") is None


async def test_a_failed_read_hands_back_a_clean_connection(shop: AsyncConnectionPool[Any]) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        async with read_snapshot(shop) as conn:
            cur = await conn.execute("SELECT * FROM no_such_table")
            await cur.fetchall()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    async with read_snapshot(shop) as again:  # and the next snapshot works
        assert await ShopRepository(again).get_order(ORDER) is not None


async def test_a_write_is_refused_inside_a_snapshot(shop: AsyncConnectionPool[Any]) -> None:
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        async with read_snapshot(shop) as conn:
            cur = await conn.execute("DELETE FROM order_items")
            await cur.fetchall()
    async with shop.connection() as other:
        cur = await other.execute("SELECT count(*) AS n FROM order_items")
        row = await cur.fetchone()
    assert row is not None and row["n"] > 0
