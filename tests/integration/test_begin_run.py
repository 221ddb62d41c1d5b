"""The statements that open and close a run (`cs_begin_run`, migration 0010): each refusal
with its own status, the claim's fence, the checkpoint it reads, the token counter."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer, prefetched
from app.db.leases import LEASE_LOST_SQLSTATE
from app.errors import Conflict, RateLimited, ThreadBusy
from app.fencing import Lease
from app.metrics import Metrics
from app.runs.limits import PostGate
from app.runs.repository import RunRepository
from app.runs.statements import BEGIN_RUN, CLOSE_RUN, Begun, close_params
from tests.integration.test_checkpointer import run_to_interrupt

OWNER = "test-owner"
TTL_MS = 5000


def new_thread(user: str | None = None) -> str:
    return f"{user or 'u-' + uuid.uuid4().hex[:8]}:{uuid.uuid4().hex[:8]}"


async def begin(
    repo: RunRepository,
    thread_id: str,
    *,
    user: str | None = None,
    client_message_id: str | None = None,
    rate: dict[str, Any] | None = None,
    budget: int = 0,
) -> tuple[str, Begun]:
    run_id = str(uuid.uuid4())
    begun = await repo.begin_run(
        run_id=run_id,
        thread_id=thread_id,
        user_id=user or thread_id.split(":")[0],
        session_id=thread_id.split(":")[1],
        client_message_id=client_message_id,
        owner=OWNER,
        ttl_ms=TTL_MS,
        rate=rate or {},
        budget=budget,
    )
    return run_id, begun


async def close(
    repo: RunRepository, thread_id: str, run_id: str, begun: Begun, tokens: int
) -> None:
    assert begun.generation is not None
    await repo.close_run(
        run_id,
        thread_id,
        "completed",
        {"status": "completed", "usage": {"input_tokens": tokens, "output_tokens": 0}},
        title="t",
        added=1,
        events=[[1, "token", {"text": "hi"}]],
        lease=Lease(thread_id, begun.generation, run_id, TTL_MS),
        user_id=thread_id.split(":")[0],
    )


class TestRefusals:
    async def test_a_second_writer_is_busy_until_the_first_run_closes(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        repo, thread = RunRepository(pool), new_thread()
        first_id, first = await begin(repo, thread)
        _, second = await begin(repo, thread)

        assert first.status == "started" and first.generation == 1
        assert second.status == "busy" and second.generation is None
        assert 0 < second.wait_s <= TTL_MS / 1000
        await close(repo, thread, first_id, first, tokens=0)
        _, third = await begin(repo, thread)
        assert third.status == "started" and third.generation == 2

    async def test_a_busy_thread_is_a_409_with_retry_after_and_the_lease_window(self) -> None:
        gate = PostGate(Settings(thread_lease_ttl_s=12), Metrics())
        error = gate.refuse("busy", 7.2)
        assert isinstance(error, ThreadBusy)
        assert error.headers["Retry-After"] == "8"
        assert error.details == {"retry_after_s": 8, "lease_ttl_s": 12}
        assert "12 s" in error.message

    async def test_a_rate_limited_post_claims_nothing(self, pool: AsyncConnectionPool[Any]) -> None:
        repo, thread = RunRepository(pool), new_thread()
        rate = {"key": f"posts:{thread}", "interval_s": 60.0, "window_s": 60.0}  # burst 1
        run_id, first = await begin(repo, thread, rate=rate)
        await close(repo, thread, run_id, first, tokens=0)
        _, refused = await begin(repo, thread, rate=rate)

        assert refused.status == "rate_limited" and refused.generation is None
        assert 0 < refused.wait_s <= 60
        assert await lease_run(pool, thread) is None  # the thread stays free
        error = PostGate(Settings(), Metrics()).refuse(refused.status, refused.wait_s)
        assert isinstance(error, RateLimited) and error.code == "rate_limited"

    async def test_a_spent_budget_is_refused_and_the_counter_outlives_the_thread(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        repo, thread = RunRepository(pool), new_thread()
        user = thread.split(":")[0]
        run_id, first = await begin(repo, thread, user=user, budget=100)
        await close(repo, thread, run_id, first, tokens=60)
        await close(repo, thread, run_id, first, tokens=60)  # a retried close counts once
        second_id, second = await begin(repo, thread, user=user, budget=100)
        await close(repo, thread, second_id, second, tokens=60)
        await repo.delete_thread(thread)
        _, refused = await begin(repo, new_thread(user), budget=100)

        assert second.status == "started"  # 60 of 100 spent
        assert refused.status == "budget_exhausted" and refused.generation is None
        assert 0 < refused.wait_s <= 86400
        error = PostGate(Settings(), Metrics()).refuse(refused.status, refused.wait_s)
        assert isinstance(error, RateLimited) and error.code == "token_budget_exhausted"

    async def test_a_repeated_client_message_id_names_the_earlier_run(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        repo, thread = RunRepository(pool), new_thread()
        run_id, first = await begin(repo, thread, client_message_id="m1")
        await close(repo, thread, run_id, first, tokens=0)
        _, again = await begin(repo, thread, client_message_id="m1")

        assert again.status == "duplicate" and again.generation is not None
        assert again.earlier is not None and again.earlier["run_id"] == run_id
        assert again.earlier["status"] == "completed"

    async def test_a_message_id_of_a_deleted_thread_is_refused_and_claims_nothing(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        """A late copy of a deleted conversation's message: `deleted`, no thread row, the
        lease left free; a new message id starts the conversation over; once the ids are
        pruned, the old one does too."""
        repo, thread = RunRepository(pool), new_thread()
        run_id, first = await begin(repo, thread, client_message_id="m1")
        await close(repo, thread, run_id, first, tokens=0)
        await repo.delete_thread(thread)

        _, late = await begin(repo, thread, client_message_id="m1")
        assert late.status == "deleted" and late.generation is None
        error = PostGate(Settings(), Metrics()).refuse(late.status, late.wait_s)
        assert isinstance(error, Conflict) and error.code == "message_deleted"
        assert await repo.thread(thread) is None
        assert await lease_run(pool, thread) is None

        new_id, fresh = await begin(repo, thread, client_message_id="m2")
        assert fresh.status == "started"
        await close(repo, thread, new_id, fresh, tokens=0)
        await repo.delete_thread(thread)
        await repo.prune_logs(0)
        _, pruned = await begin(repo, thread, client_message_id="m1")
        assert pruned.status == "started"


class TestClosing:
    async def test_the_close_releases_the_lease_and_stores_the_log(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        repo, thread = RunRepository(pool), new_thread()
        run_id, begun = await begin(repo, thread)
        await close(repo, thread, run_id, begun, tokens=0)

        assert await lease_run(pool, thread) is None
        row = await repo.run(thread, run_id)
        assert row is not None and row["status"] == "completed"
        assert row["events"] == [[1, "token", {"text": "hi"}]]
        assert await repo.prune_logs(keep_s=0) >= 1
        row = await repo.run(thread, run_id)
        assert row is not None and row["events"] is None and row["status"] == "completed"

    async def test_a_second_close_of_a_recorded_run_changes_nothing(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        """A close that committed though its client saw an error (a connection cut after the
        COMMIT) is followed by another: a retry, or the executor's fallback, which finds the
        lease released and records the run failed. The first outcome stands."""
        repo, thread = RunRepository(pool), new_thread()
        run_id, begun = await begin(repo, thread)
        await close(repo, thread, run_id, begun, tokens=0)
        assert begun.generation is not None
        await repo.close_run(
            run_id,
            thread,
            "failed",
            {"status": "failed", "error": {"code": "thread_superseded"}},
            title=None,
            added=1,
            lease=Lease(thread, begun.generation, run_id, TTL_MS),
        )

        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT r.status, r.result->>'status' AS recorded, t.message_count"
                " FROM runs r JOIN threads t USING (thread_id) WHERE r.run_id = %s",
                (run_id,),
            )
            row = await cur.fetchone()
        assert row is not None
        assert (row["status"], row["recorded"]) == ("completed", "completed")
        assert row["message_count"] == 1  # not added twice

    async def test_a_handoff_recorded_after_the_lease_passed_on_still_queues_the_thread(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        """A run that handed off and whose outcome is recorded late (after an outage), once
        its lease expired and another run claimed the thread: the thread waits for a
        person all the same, and the other run's lease is left alone."""
        repo, thread = RunRepository(pool), new_thread()
        run_id, begun = await begin(repo, thread)
        assert begun.generation is not None
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE thread_leases SET expires_at = now() - interval '1 s' WHERE thread_id = %s",
                (thread,),
            )
        later_id, later = await begin(repo, thread)
        assert later.status == "started"
        await repo.close_run(
            run_id,
            thread,
            "completed",
            {"status": "completed"},
            title="t",
            added=1,
            lease=Lease(thread, begun.generation, run_id, TTL_MS),
            handoff={"reason": "asked for a person"},
        )
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT control, control_reason, run_id FROM thread_leases WHERE thread_id = %s",
                (thread,),
            )
            row = await cur.fetchone()
        assert row is not None
        assert row["control"] == "queued" and row["control_reason"] == "asked for a person"
        assert row["run_id"] == later_id  # still the later run's lease

    async def test_a_run_whose_process_died_on_a_thread_nobody_claims_is_closed(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        """Its lease expired long enough ago: the run is abandoned and the lease names no
        run, so a stopped owner that wakes commits nothing. A lease that is live, or expired
        only just, is left alone. The thread's next claim still names the dead run as the
        one it took over, so it finishes the step that run left."""
        repo = RunRepository(pool)
        dead, live, recent = new_thread(), new_thread(), new_thread()
        dead_run, _ = await begin(repo, dead)
        live_run, _ = await begin(repo, live)
        recent_run, _ = await begin(repo, recent)
        for thread, ago in ((dead, "1 minute"), (recent, "1 second")):
            async with pool.connection() as conn:
                await conn.execute(
                    "UPDATE thread_leases SET expires_at = now() - %s::interval"
                    " WHERE thread_id = %s",
                    (ago, thread),
                )
        assert await repo.abandon_dead(grace_s=15) >= 1
        assert await repo.abandon_dead(grace_s=15) == 0  # once
        statuses = {}
        for thread, run_id in ((dead, dead_run), (live, live_run), (recent, recent_run)):
            row = await repo.run(thread, run_id)
            assert row is not None
            statuses[thread] = row["status"]
        assert statuses == {dead: "abandoned", live: "running", recent: "running"}
        assert await lease_run(pool, dead) is None
        assert await lease_run(pool, live) == live_run
        assert await lease_run(pool, recent) == recent_run
        with_fence = Lease(dead, 1, dead_run, TTL_MS)
        assert await fenced_commit(pool, with_fence) is False  # the woken owner stops
        _, again = await begin(repo, dead)
        assert again.status == "started" and again.stale_run == dead_run
        _, later = await begin(repo, dead)  # (busy: the claim above holds it)
        assert later.status == "busy"


class TestCheckpointRead:
    async def test_the_claim_reads_the_checkpoint_the_saver_would_load(
        self, pool: AsyncConnectionPool[Any], settings: Settings
    ) -> None:
        """The prefetched row loads as the same tuple as upstream's own read."""
        thread = new_thread()
        saver = PostgresCheckpointer(pool)
        await run_to_interrupt(saver, thread)  # blobs, and pending writes of an interrupt
        repo = RunRepository(pool)
        run_id, begun = await begin(repo, thread)
        config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}

        upstream = await saver.aget_tuple(config)
        with prefetched(thread, begun.checkpoint):
            ours = await saver.aget_tuple(config)
        assert upstream is not None and ours is not None
        assert begun.checkpoint_id == upstream.config["configurable"]["checkpoint_id"]
        assert ours.checkpoint == upstream.checkpoint
        assert ours.metadata == upstream.metadata
        assert ours.parent_config == upstream.parent_config
        assert ours.pending_writes == upstream.pending_writes and ours.pending_writes
        await close(repo, thread, run_id, begun, tokens=0)

    async def test_a_thread_without_checkpoints_loads_none_without_a_read(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        repo, thread = RunRepository(pool), new_thread()
        run_id, begun = await begin(repo, thread)
        saver = PostgresCheckpointer(pool)
        config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}

        assert begun.checkpoint is None
        with prefetched(thread, None):
            assert await saver.aget_tuple(config) is None
        await close(repo, thread, run_id, begun, tokens=0)


async def lease_run(pool: AsyncConnectionPool[Any], thread_id: str) -> str | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT run_id FROM thread_leases WHERE thread_id = %s", (thread_id,)
        )
        row = await cur.fetchone()
    return None if row is None else row["run_id"]


async def fenced_commit(pool: AsyncConnectionPool[Any], lease: Lease) -> bool:
    """Whether a commit fenced with `lease` passes (cs_fence)."""
    try:
        async with pool.connection() as conn:
            await conn.execute(
                "SELECT cs_fence(%s, %s, %s, %s)",
                (lease.thread_id, lease.generation, lease.run_id, lease.ttl_ms),
            )
    except psycopg.Error as error:
        assert error.sqlstate == LEASE_LOST_SQLSTATE
        return False
    return True


async def row_counts(
    conn: psycopg.AsyncConnection[Any], *tables: str
) -> dict[str, tuple[int, int, int]]:
    """(inserted, updated, of them HOT) per table, as this transaction's statistics have
    them. A backend's pending counts may hold earlier transactions' until flushed: compare
    two readings, never one."""
    cur = await conn.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
        " WHERE relname = ANY(%s)",
        (list(tables),),
    )
    return {
        r["relname"]: (r["n_tup_ins"], r["n_tup_upd"], r["n_tup_hot_upd"])
        for r in await cur.fetchall()
    }


def counted(
    before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]]
) -> dict[str, tuple[int, ...]]:
    zero = (0, 0, 0)
    return {
        t: tuple(a - b for a, b in zip(n, before.get(t, zero), strict=True))
        for t, n in after.items()
    }


def begin_params(thread: str, run_id: str, client_message_id: str | None) -> dict[str, Any]:
    """BEGIN_RUN's parameters for a run with no rate limit and no budget."""
    return {
        "thread_id": thread,
        "user_id": thread.split(":")[0],
        "session_id": thread.split(":")[1],
        "owner": OWNER,
        "run_id": run_id,
        "ttl_ms": TTL_MS,
        "client_message_id": client_message_id,
        "rate_key": None,
        "interval_s": 1.0,
        "window_s": 1.0,
        "budget": 0,
    }


async def test_a_new_thread_is_stored_pinned_in_one_row_version(
    pool: AsyncConnectionPool[Any],
) -> None:
    # Inserted with its policy version, not inserted and then updated (a row version more).
    thread = new_thread()
    async with pool.connection() as conn, conn.transaction():
        before = await row_counts(conn, "threads")
        cur = await conn.execute(BEGIN_RUN, begin_params(thread, f"run-{uuid.uuid4().hex}", None))
        begun = await cur.fetchone()
        after = await row_counts(conn, "threads")
        cur = await conn.execute(
            "SELECT policy_version FROM threads WHERE thread_id = %s", (thread,)
        )
        stored = await cur.fetchone()
    assert begun is not None and begun["status"] == "started"
    assert begun["policy_version"] is not None  # a live version pins it
    assert stored is not None and stored["policy_version"] == begun["policy_version"]
    inserted, updated, _ = counted(before, after)["threads"]
    assert (inserted, updated) == (1, 0)


async def test_two_turns_update_their_thread_and_lease_in_place(
    pool: AsyncConnectionPool[Any],
) -> None:
    """Each run's opening and closing statements, twice on one new thread: the thread and
    its lease are inserted once, and every update of them is a HOT update (migration 0028:
    no index covers a column they change, and their pages keep room)."""
    thread = new_thread()
    async with pool.connection() as conn, conn.transaction():
        before = await row_counts(conn, "threads", "thread_leases")
        for turn in range(2):
            run_id = f"run-{uuid.uuid4().hex}"
            cur = await conn.execute(BEGIN_RUN, begin_params(thread, run_id, f"m-{turn}"))
            begun = await cur.fetchone()
            assert begun is not None and begun["status"] == "started"
            lease = Lease(thread, begun["generation"], run_id, TTL_MS)
            result = {"status": "completed", "usage": {}}
            params = close_params(
                run_id, thread, "completed", result, "a title", 2, None, lease, None, None
            )
            await conn.execute(CLOSE_RUN, {**params, "ttft_ms": 5})
        after = await row_counts(conn, "threads", "thread_leases")
    # (inserted, updated, of them HOT): the lease is claimed again and released twice
    assert counted(before, after) == {"threads": (1, 2, 2), "thread_leases": (1, 3, 3)}
