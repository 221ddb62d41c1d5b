"""Retention (app/db/retention.py): idle threads expire, old histories keep their turns.

The service runs in-process (httpx against the ASGI app, lifespan included) with the
scripted model; the sweep runs as the service's loop and `cs-agent prune` run it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.api.auth import issue_token
from app.config import Settings
from app.db.retention import RETENTION_LOCK_KEY, Policy, plan_history, sweep
from app.main import create_app
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.fakes.fixtures import chat_model
from tests.integration.agent_harness import fetch_all, fetch_one, load_small_shop

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"
PRUNE_NOW = Policy(thread_ttl_days=90, history_keep_days=0)
CONVERSATION_TABLES = (
    "threads",
    "runs",
    "checkpoints",
    "checkpoint_writes",
    "checkpoint_blobs",
    "transcript_archive",
)


class Service:
    def __init__(self, client: httpx.AsyncClient, settings: Settings, model: ScriptedModelServer):
        self.client = client
        self.model = model
        secret = settings.jwt_secret.get_secret_value()
        self.headers = {"Authorization": f"Bearer {issue_token(secret, NOAH, role='customer')}"}

    async def say(self, session: str, text: str, *replies: Reply) -> dict[str, Any]:
        self.model.use(Script(list(replies)))
        r = await self.client.post(
            f"/threads/{session}/messages", json={"content": text}, headers=self.headers
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        r = await self.client.get(path, params=params, headers=self.headers)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    async def state(self, session: str, **params: Any) -> dict[str, Any]:
        return await self.get(f"/threads/{session}/state", **params)

    async def history(self, session: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await self.get(f"/threads/{session}/history", limit=200))[
            "items"
        ]
        return items

    async def conversation(self, session: str) -> None:
        """Three turns: a greeting, a lookup (a tool round), a cancel confirmed by a resume."""
        await self.say(session, "hello", Reply.say("Hello! How can I help?"))
        await self.say(
            session,
            f"where is {PENDING_ORDER}?",
            Reply.call("get_order_details", order_id=PENDING_ORDER),
            Reply.say("It is pending."),
        )
        await self.cancel_waiting_for_yes(session)
        r = await self.client.post(
            f"/threads/{session}/resume", json={"decision": "approve"}, headers=self.headers
        )
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text

    async def cancel_waiting_for_yes(self, session: str) -> None:
        body = await self.say(
            session,
            "cancel it please",
            Reply.call("cancel_pending_order", order_id=PENDING_ORDER, reason="no longer needed"),
            Reply.say("Cancelled."),
        )
        assert body["status"] == "interrupted", body


@pytest.fixture(scope="module")
async def app_client(
    settings: Settings, scripted_model_session: ScriptedModelServer
) -> AsyncIterator[tuple[httpx.AsyncClient, Settings]]:
    quiet = settings.model_copy(update={"retention_sweep_every_s": 0})  # sweeps: the tests'
    app = create_app(quiet, model=chat_model(scripted_model_session))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as c,
    ):
        yield c, quiet


@pytest.fixture
async def service(
    app_client: tuple[httpx.AsyncClient, Settings],
    db: AsyncConnectionPool[Any],
    model_server: ScriptedModelServer,
) -> Service:
    await load_small_shop(db)
    return Service(*app_client, model_server)


async def rows_of(pool: AsyncConnectionPool[Any], thread_id: str) -> dict[str, int]:
    counts = {}
    for table in CONVERSATION_TABLES:
        row = await fetch_one(
            pool, f"SELECT count(*) AS n FROM {table} WHERE thread_id = %s", thread_id
        )
        counts[table] = int(row["n"])
    return counts


async def everything(pool: AsyncConnectionPool[Any]) -> list[list[dict[str, Any]]]:
    """Every row of the conversation tables and the leases, in a fixed order."""
    tables = [*CONVERSATION_TABLES, "thread_leases"]
    return [await fetch_all(pool, f"SELECT * FROM {t} ORDER BY 1, 2, 3") for t in tables]


def prune_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "HISTORY_KEEP_DAYS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "app", "prune", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def texts(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in state["messages"]]


class TestHistoryPrune:
    async def test_a_pruned_thread_keeps_its_transcript_and_one_checkpoint_per_turn(
        self, service: Service, db: AsyncConnectionPool[Any]
    ) -> None:
        await service.conversation("p1")
        await service.say("p1", "thanks", Reply.say("You're welcome."))
        before = await service.state("p1")
        assert len(await service.history("p1")) > 4 * 3

        swept = await sweep(db, PRUNE_NOW)

        assert swept is not None and swept.threads_pruned == 1 and swept.checkpoint_blobs > 0
        after = await service.state("p1")
        assert texts(after) == texts(before) and after["checkpoint_id"] == before["checkpoint_id"]
        history = await service.history("p1")
        assert [h["next"] for h in history] == [[]] * 4  # one per turn, each where it ended
        assert [h["parent_checkpoint_id"] for h in history] == [
            *(h["checkpoint_id"] for h in history[1:]),
            None,
        ]
        ends = [h["message_count"] for h in reversed(history)]
        assert ends == sorted(ends) and ends[-1] == len(after["messages"])
        for h in history:  # every kept checkpoint loads whole: its blobs stayed
            at = await service.state("p1", checkpoint_id=h["checkpoint_id"])
            assert texts(at) == texts(after)[: h["message_count"]]
        tid = f"{NOAH}:p1"
        assert (await rows_of(db, tid))["checkpoints"] == 4
        assert (await rows_of(db, tid))["checkpoint_writes"] == 0
        again = await sweep(db, PRUNE_NOW)
        assert again is not None and again.threads_pruned == 0  # nothing new since

    async def test_rewind_to_a_kept_turn_boundary_then_a_new_message_continues(
        self, service: Service, db: AsyncConnectionPool[Any]
    ) -> None:
        await service.conversation("p2")
        await sweep(db, PRUNE_NOW)
        first_turn_end = (await service.history("p2"))[-1]

        r = await service.client.post(
            "/threads/p2/rewind",
            json={"checkpoint_id": first_turn_end["checkpoint_id"]},
            headers=service.headers,
        )

        assert r.status_code == 200, r.text
        assert texts(r.json()) == [("user", "hello"), ("assistant", "Hello! How can I help?")]
        body = await service.say("p2", "actually, what is shipping?", Reply.say("Free."))
        assert body["status"] == "completed"
        state = await service.state("p2")
        assert texts(state)[2:] == [("user", "actually, what is shipping?"), ("assistant", "Free.")]
        # A prune after the fork keeps both branches' turns; the old branch is still history.
        await sweep(db, PRUNE_NOW)
        history = await service.history("p2")
        assert history[0]["checkpoint_id"] == state["checkpoint_id"]
        assert first_turn_end["checkpoint_id"] in [h["checkpoint_id"] for h in history]
        assert texts(await service.state("p2")) == texts(state)

    async def test_rewind_by_message_lands_on_the_turn_before_it(
        self, service: Service, db: AsyncConnectionPool[Any]
    ) -> None:
        await service.conversation("p3")
        await sweep(db, PRUNE_NOW)
        messages = (await service.state("p3"))["messages"]
        cancel = next(m for m in messages if m["content"] == "cancel it please")

        r = await service.client.post(
            "/threads/p3/rewind", json={"message_id": cancel["id"]}, headers=service.headers
        )

        assert r.status_code == 200, r.text
        assert [m["content"] for m in r.json()["messages"]][-1] == "It is pending."

    async def test_a_thread_waiting_for_a_confirmation_keeps_it(
        self, service: Service, db: AsyncConnectionPool[Any]
    ) -> None:
        await service.say("p4", "hello", Reply.say("Hello!"))
        await service.cancel_waiting_for_yes("p4")

        swept = await sweep(db, PRUNE_NOW)

        assert swept is not None and swept.threads_pruned == 1
        assert (await service.state("p4"))["pending"][0]["name"] == "cancel_pending_order"
        r = await service.client.post(
            "/threads/p4/resume", json={"decision": "approve"}, headers=service.headers
        )
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        order = await fetch_one(db, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert order["status"] == "cancelled"

    async def test_a_thread_with_an_active_run_is_not_touched(
        self, service: Service, db: AsyncConnectionPool[Any]
    ) -> None:
        await service.conversation("p5")
        tid = f"{NOAH}:p5"
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE threads SET updated_at = now() - interval '100 days' WHERE thread_id = %s",
                (tid,),
            )
            await conn.execute(
                "UPDATE runs SET created_at = now() - interval '100 days' WHERE thread_id = %s",
                (tid,),
            )
            await conn.execute("SELECT cs_claim_thread(%s, 'replica-a', 'run-live', 60000)", (tid,))
        before = await everything(db)

        swept = await sweep(db, PRUNE_NOW)

        assert swept is not None and swept.threads_busy == 1 and swept.threads_deleted == 0
        assert await everything(db) == before


class TestThreadLifetime:
    async def test_an_idle_thread_past_its_lifetime_disappears(
        self, service: Service, db: AsyncConnectionPool[Any]
    ) -> None:
        await service.conversation("old")
        await service.say("new", "hello", Reply.say("Hello!"))
        old, new = f"{NOAH}:old", f"{NOAH}:new"
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE threads SET updated_at = now() - interval '91 days' WHERE thread_id = %s",
                (old,),
            )
            await conn.execute(
                "UPDATE runs SET created_at = now() - interval '91 days' WHERE thread_id = %s",
                (old,),
            )
        kept = await rows_of(db, new)

        swept = await sweep(db, Policy(thread_ttl_days=90, history_keep_days=None))

        assert swept is not None and swept.threads_deleted == 1 and swept.runs == 4
        assert await rows_of(db, old) == dict.fromkeys(CONVERSATION_TABLES, 0)
        assert await rows_of(db, new) == kept
        r = await service.client.get("/threads/old/state", headers=service.headers)
        assert r.status_code == 404
        lease = await fetch_one(db, "SELECT run_id FROM thread_leases WHERE thread_id = %s", old)
        assert lease["run_id"] is None  # the row stays: its generation never restarts at 1
        audit = await fetch_all(db, "SELECT arguments FROM audit_log WHERE thread_id = %s", old)
        assert audit and all(set(a["arguments"]) <= {"order_id", "reason"} for a in audit)


class TestSweeps:
    async def test_dry_run_changes_nothing_and_prints_what_a_sweep_removes(
        self, service: Service, db: AsyncConnectionPool[Any], database_url: str
    ) -> None:
        await service.conversation("c1")
        before = await everything(db)

        dry = prune_cli(database_url, "--dry-run")

        assert dry.returncode == 0, dry.stderr
        assert await everything(db) == before
        assert "would remove (dry run, nothing changed)" in dry.stdout
        assert "1 threads pruned" in dry.stdout
        real = prune_cli(database_url)
        assert real.returncode == 0, real.stderr
        assert real.stdout.split(": ", 1)[1] == dry.stdout.split(": ", 1)[1]
        assert (await rows_of(db, f"{NOAH}:c1"))["checkpoints"] == 3

    async def test_a_sweep_gives_way_while_another_replica_sweeps(
        self, service: Service, db: AsyncConnectionPool[Any], database_url: str
    ) -> None:
        await service.conversation("c2")
        before = await everything(db)
        async with db.connection() as other, other.transaction():
            await other.execute("SELECT pg_try_advisory_xact_lock(%s)", (RETENTION_LOCK_KEY,))
            assert await sweep(db, PRUNE_NOW) is None
            cli = await asyncio.to_thread(prune_cli, database_url)
            assert cli.returncode == 0 and "another sweep holds" in cli.stdout
            assert await everything(db) == before
        swept = await sweep(db, PRUNE_NOW)
        assert swept is not None and swept.threads_pruned == 1

    async def test_the_service_sweeps_on_its_own(
        self,
        settings: Settings,
        db: AsyncConnectionPool[Any],
        model_server: ScriptedModelServer,
    ) -> None:
        await load_small_shop(db)
        sweeping = settings.model_copy(
            update={"retention_sweep_every_s": 0.2, "history_keep_days": 0.0}
        )
        app = create_app(sweeping, model=chat_model(model_server))
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as c,
        ):
            live = Service(c, sweeping, model_server)
            await live.say("s1", "hello", Reply.say("Hello!"))
            await live.say("s1", "and again", Reply.say("Hello again!"))
            for _ in range(100):
                if len(await live.history("s1")) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(await live.history("s1")) == 2


class TestPlan:
    def test_keeps_each_turn_end_and_each_branch_end_re_parented_and_stays_whole(self) -> None:
        rows = [
            ("01", None, "input", -1),
            ("02", "01", "loop", 0),
            ("03", "02", "loop", 1),  # turn 1 ends
            ("04", "03", "input", 2),
            ("05", "04", "loop", 3),  # turn 2 ends; then a rewind to 03
            ("06", "02", "fork", 2),  # the copy of 03, under 03's parent
            ("07", "06", "input", 3),
            ("08", "07", "loop", 4),
        ]
        plan = plan_history(rows)
        assert plan.kept == ["03", "05", "06", "08"]
        assert plan.dropped == ["01", "02", "04", "07"]
        assert plan.reparent == {"03": None, "05": "03", "06": None, "08": "06"}
        pruned = [
            (c, plan.reparent.get(c, p), source, step)
            for c, p, source, step in rows
            if c in plan.kept
        ]
        again = plan_history(pruned)
        assert again.kept == plan.kept and again.dropped == [] and again.reparent == {}

    def test_a_turn_waiting_for_a_confirmation_or_cut_short_ends_where_it_stopped(self) -> None:
        rows = [
            ("01", None, "input", -1),
            ("02", "01", "loop", 0),  # waits for a yes; the resume goes on from it
            ("03", "02", "loop", 1),  # the write, then a cancel cut the turn
            ("04", "03", "update", 2),  # the cancel's close
            ("05", "04", "input", 3),
            ("06", "05", "loop", 4),  # waits for a yes (the head)
        ]
        assert plan_history(rows).kept == ["04", "06"]
