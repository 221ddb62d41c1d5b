"""`ThreadLeases`: one writer per thread, and fenced commits for the run that holds it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import PostgresCheckpointer
from app.db.leases import fence
from app.db.writes import execute_write
from app.fencing import LeaseLost
from app.runs.leases import Claim, ThreadLeases
from app.runs.statements import ABANDON_DEAD
from app.turn import Turn, current_turn
from tests.integration.test_begin_run import counted, row_counts


@pytest.fixture
async def leases(pool: AsyncConnectionPool[Any]) -> AsyncIterator[ThreadLeases]:
    leases = ThreadLeases(pool, ttl_s=5)
    await leases.open()
    yield leases
    await leases.close()


def new_thread() -> str:
    return f"u:{uuid.uuid4().hex}"


async def watched_claim(leases: ThreadLeases) -> tuple[str, Claim, list[str]]:
    """A new thread claimed for "run-1", and the list its heartbeat's loss report fills."""
    thread = new_thread()
    claim = await leases.claim(thread, "run-1")
    assert claim is not None
    lost: list[str] = []
    leases.on_lost(claim.lease, lambda: lost.append(thread))
    return thread, claim, lost


async def expire(pool: AsyncConnectionPool[Any], thread_id: str) -> None:
    """What the clock does to the lease of a process that died or stalled."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE thread_leases SET expires_at = now() - interval '1 s' WHERE thread_id = %s",
            (thread_id,),
        )


async def fenced_insert(pool: AsyncConnectionPool[Any], marker: str) -> None:
    async with pool.connection() as conn, conn.transaction():
        await fence(conn)
        await conn.execute(
            "INSERT INTO audit_log (actor, thread_id, tool_name, arguments, ok, outcome)"
            " VALUES ('test', 't', %s, '{}', true, '')",
            (marker,),
        )


async def committed(pool: AsyncConnectionPool[Any], marker: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM audit_log WHERE tool_name = %s", (marker,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


class TestClaims:
    async def test_a_claim_excludes_every_other_run_until_released(
        self, leases: ThreadLeases, pool: AsyncConnectionPool[Any]
    ) -> None:
        other_process = ThreadLeases(pool, ttl_s=5)
        thread = new_thread()
        claim = await leases.claim(thread, "run-1")
        assert claim is not None and claim.lease.generation == 1
        assert await leases.claim(thread, "run-2") is None  # this process
        assert await other_process.claim(thread, "run-3") is None  # another one
        await leases.release(claim.lease)
        again = await other_process.claim(thread, "run-4")
        assert again is not None and again.lease.generation == 2
        assert again.stale_run is None

    async def test_concurrent_claims_give_the_thread_to_exactly_one(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        processes = [ThreadLeases(pool, ttl_s=5) for _ in range(8)]
        thread = new_thread()
        claims = await asyncio.gather(
            *(p.claim(thread, f"run-{i}") for i, p in enumerate(processes))
        )
        assert sum(c is not None for c in claims) == 1

    async def test_an_expired_lease_is_taken_over_and_its_run_closed_as_abandoned(
        self, leases: ThreadLeases, db: AsyncConnectionPool[Any]
    ) -> None:
        thread = new_thread()
        dead = ThreadLeases(db, ttl_s=5)
        first = await dead.claim(thread, "dead-run")
        assert first is not None
        async with db.connection() as conn:
            await conn.execute(
                "INSERT INTO runs (run_id, thread_id, status) VALUES ('dead-run', %s, 'running')",
                (thread,),
            )
        assert await leases.claim(thread, "live-run") is None  # still live
        await expire(db, thread)
        claim = await leases.claim(thread, "live-run")
        assert claim is not None
        assert claim.stale_run == "dead-run"
        assert claim.lease.generation == first.lease.generation + 1
        async with db.connection() as conn:
            cur = await conn.execute("SELECT status FROM runs WHERE run_id = 'dead-run'")
            row = await cur.fetchone()
        assert row is not None and row["status"] == "abandoned"


class TestFencing:
    async def test_the_holder_commits_and_a_superseded_run_commits_nothing(
        self, leases: ThreadLeases, db: AsyncConnectionPool[Any]
    ) -> None:
        thread = new_thread()
        old = await leases.claim(thread, "old-run")
        assert old is not None
        token = current_turn.set(Turn(lease=old.lease))
        try:
            await fenced_insert(db, "by-old-while-holding")
            await expire(db, thread)
            newer = await ThreadLeases(db, ttl_s=5).claim(thread, "new-run")
            assert newer is not None
            with pytest.raises(LeaseLost):
                await fenced_insert(db, "by-old-after-takeover")
        finally:
            current_turn.reset(token)
        assert await committed(db, "by-old-while-holding") == 1
        assert await committed(db, "by-old-after-takeover") == 0

    async def test_a_fence_renews_only_once_a_third_of_the_ttl_has_gone_by(
        self, leases: ThreadLeases, db: AsyncConnectionPool[Any]
    ) -> None:
        # A fresh lease is locked, not rewritten: no new row version (its ctid stays), as
        # every rewrite of the indexed `expires_at` costs a row version in each index.
        thread = new_thread()
        claim = await leases.claim(thread, "run-1")
        assert claim is not None

        async def lease_row() -> tuple[Any, float]:
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT ctid::text AS ctid,"
                    " extract(epoch FROM expires_at - clock_timestamp())::float8 AS left_s"
                    " FROM thread_leases WHERE thread_id = %s",
                    (thread,),
                )
                row = await cur.fetchone()
            assert row is not None
            return row["ctid"], row["left_s"]

        token = current_turn.set(Turn(lease=claim.lease))
        try:
            ctid, left = await lease_row()
            await fenced_insert(db, f"fresh-{thread}")
            assert await lease_row() == (ctid, pytest.approx(left, abs=0.5))
            async with db.connection() as conn:  # 1 s left of 5: past a third of the TTL
                await conn.execute(
                    "UPDATE thread_leases SET expires_at = clock_timestamp() + interval '1 s'"
                    " WHERE thread_id = %s",
                    (thread,),
                )
            await fenced_insert(db, f"late-{thread}")
            _, left = await lease_row()
            assert 4.0 < left <= 5.0
        finally:
            current_turn.reset(token)

    async def test_a_write_by_a_superseded_run_raises_and_leaves_nothing(
        self, leases: ThreadLeases, db: AsyncConnectionPool[Any]
    ) -> None:
        # The write's fence goes out in one pipeline with its lock and look-up
        # (app/db/writes.py): the lost lease still surfaces as LeaseLost, before the action.
        thread = new_thread()
        old = await leases.claim(thread, "old-run")
        assert old is not None
        acted: list[str] = []
        marker = f"action-{thread}"

        async def action(conn: Any) -> str:
            acted.append("ran")
            await conn.execute(
                "INSERT INTO audit_log (actor, thread_id, tool_name, arguments, ok, outcome)"
                " VALUES ('test', 't', %s, '{}', true, '')",
                (marker,),
            )
            return "done"

        async def write(key: str) -> Any:
            return await execute_write(
                db,
                idempotency_key=key,
                thread_id=thread,
                actor="test",
                customer_id=None,
                tool_name="write-under-lease",
                arguments={},
                action=action,
            )

        token = current_turn.set(Turn(lease=old.lease))
        try:
            held = await write(f"{thread}:held")
            await expire(db, thread)
            assert await ThreadLeases(db, ttl_s=5).claim(thread, "new-run") is not None
            with pytest.raises(LeaseLost):
                await write(f"{thread}:superseded")
        finally:
            current_turn.reset(token)
        assert held.ok and acted == ["ran"]  # the second action never ran
        assert await committed(db, marker) == 1  # the first action's only
        async with db.connection() as conn:  # and no record of the refused one
            cur = await conn.execute(
                "SELECT count(*) AS n FROM tool_executions WHERE idempotency_key = %s",
                (f"{thread}:superseded",),
            )
            row = await cur.fetchone()
        assert row is not None and row["n"] == 0

    async def test_held_steps_and_a_closing_statement_commit_together_or_not_at_all(
        self, leases: ThreadLeases, db: AsyncConnectionPool[Any]
    ) -> None:
        # How a run that ended well stores its last steps with its outcome (executor.py).
        saver = PostgresCheckpointer(db)
        thread = new_thread()
        claim = await leases.claim(thread, "run-1")
        assert claim is not None
        mark = (
            "INSERT INTO audit_log (actor, thread_id, tool_name, arguments, ok, outcome)"
            " VALUES ('test', %(thread)s, %(marker)s, '{}', true, '') RETURNING xmin::text"
        )

        async def step(held: Any) -> None:
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            checkpoint: Any = {**empty_checkpoint(), "id": str(uuid.uuid4())}
            await saver.aput(config, checkpoint, {"source": "loop", "step": 0}, {})  # type: ignore[typeddict-item]
            assert len(held.batches) == 1  # held back

        async def checkpoints() -> list[str]:
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT xmin::text FROM checkpoints WHERE thread_id = %s", (thread,)
                )
                return [row["xmin"] for row in await cur.fetchall()]

        token = current_turn.set(Turn(lease=claim.lease))
        try:
            async with saver.held_until_needed() as held:
                await step(held)
                row = await held.store_then(mark, {"thread": thread, "marker": "with-steps"})
                assert held.batches == []
            assert row is not None and await checkpoints() == [row["xmin"]]  # one transaction

            await expire(db, thread)
            assert await ThreadLeases(db, ttl_s=5).claim(thread, "run-2") is not None
            with pytest.raises(LeaseLost):  # the block's own store, at its end, fails too
                async with saver.held_until_needed() as held:
                    await step(held)
                    with pytest.raises(LeaseLost):
                        await held.store_then(mark, {"thread": thread, "marker": "superseded"})
                    assert len(held.batches) == 1  # held again, for the block's end
        finally:
            current_turn.reset(token)
        assert len(await checkpoints()) == 1
        assert await committed(db, "with-steps") == 1
        assert await committed(db, "superseded") == 0

    async def test_a_release_by_a_superseded_run_leaves_the_new_claim_alone(
        self, leases: ThreadLeases, pool: AsyncConnectionPool[Any]
    ) -> None:
        thread = new_thread()
        old = await leases.claim(thread, "old-run")
        assert old is not None
        await expire(pool, thread)
        other = ThreadLeases(pool, ttl_s=5)
        newer = await other.claim(thread, "new-run")
        assert newer is not None
        await leases.release(old.lease)
        assert await ThreadLeases(pool, ttl_s=5).claim(thread, "third-run") is None

    async def test_the_heartbeat_reports_a_lease_taken_over(
        self, leases: ThreadLeases, pool: AsyncConnectionPool[Any]
    ) -> None:
        thread, _, lost = await watched_claim(leases)
        await leases.renew()
        assert lost == []
        await expire(pool, thread)
        assert await ThreadLeases(pool, ttl_s=5).claim(thread, "run-2") is not None
        await leases.renew()
        assert lost == [thread]

    async def test_a_lease_its_own_run_released_is_not_reported_lost(
        self, leases: ThreadLeases, pool: AsyncConnectionPool[Any]
    ) -> None:
        # The run's closing statement frees the lease a moment before the run forgets it;
        # a renewal in between used to find it gone and stop the run as superseded.
        thread, claim, lost = await watched_claim(leases)
        async with pool.connection() as conn:
            await conn.execute("SELECT cs_release_thread(%s, %s)", (thread, claim.lease.generation))
        await leases.renew()
        await leases.renew()
        assert lost == []
        assert await ThreadLeases(pool, ttl_s=5).claim(thread, "run-2") is not None

    async def test_a_lease_the_sweep_freed_from_its_run_is_lost(
        self, leases: ThreadLeases, pool: AsyncConnectionPool[Any]
    ) -> None:
        thread, _, lost = await watched_claim(leases)
        await expire(pool, thread)
        async with pool.connection() as conn:  # the poller's sweep of dead runs
            await conn.execute(
                "INSERT INTO runs (run_id, thread_id, status) VALUES ('run-1', %s, 'running')",
                (thread,),
            )
            await conn.execute(ABANDON_DEAD, {"grace_s": 0})
        await leases.renew()
        assert lost == [thread]


async def test_a_lease_is_claimed_and_released_in_place(pool: AsyncConnectionPool[Any]) -> None:
    """No index covers what a claim or a release changes (migration 0028), so each is a
    HOT update: no new index entries, the dead version pruned on its page."""
    thread = new_thread()
    async with pool.connection() as conn, conn.transaction():
        before = await row_counts(conn, "thread_leases")
        for run in ("run-1", "run-2"):
            claimed = await conn.execute(
                "SELECT generation FROM cs_claim_thread(%s, 'test', %s, 5000)", (thread, run)
            )
            row = await claimed.fetchone()
            assert row is not None and row["generation"] is not None
            await conn.execute("SELECT cs_release_thread(%s, %s)", (thread, row["generation"]))
        after = await row_counts(conn, "thread_leases")
    assert counted(before, after)["thread_leases"] == (1, 3, 3)


async def _lease_and_notes(pool: AsyncConnectionPool[Any], thread: str) -> tuple[Any, list[str]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT run_id FROM thread_leases WHERE thread_id = %s", (thread,))
        row = await cur.fetchone()
        cur = await conn.execute("SELECT run_id FROM held_claims WHERE thread_id = %s", (thread,))
        notes = [r["run_id"] for r in await cur.fetchall()]
    return (row or {}).get("run_id"), notes


async def test_the_sweep_frees_a_staff_claim_whose_process_died(
    pool: AsyncConnectionPool[Any],
) -> None:
    """A claim that is not a run's (a staff message, a rewind) has no run row: its note
    (migration 0029) is what the sweep finds once its holder is gone (the chaos soak found
    one such lease naming a killed process's staff claim for good)."""
    dead, live, done = new_thread(), new_thread(), new_thread()
    leases = ThreadLeases(pool, ttl_s=5)  # never renewed: the process that held it is gone
    for thread in (dead, live, done):
        assert await leases.claim(thread, f"staff-{thread[-6:]}") is not None
    done_claim = await ThreadLeases(pool, ttl_s=5).claim(done, "staff-later")
    assert done_claim is None  # still held by the first claim
    await expire(pool, dead)
    async with pool.connection() as conn:  # `done` released normally
        await conn.execute("UPDATE thread_leases SET run_id = NULL WHERE thread_id = %s", (done,))
        await conn.execute(ABANDON_DEAD, {"grace_s": 0})
    assert await _lease_and_notes(pool, dead) == (None, [])
    assert await _lease_and_notes(pool, live) == (f"staff-{live[-6:]}", [f"staff-{live[-6:]}"])
    assert await _lease_and_notes(pool, done) == (None, [])  # the note went with its lease
