"""The HTTP API over a real uvicorn server; SSE parsed with httpx-sse."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import jwt
import psycopg
import pytest
from httpx_sse import aconnect_sse
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer
from app.runs.repository import RunRepository
from app.threads.inspect import HISTORY_PAGE
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import fetch_one, load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH, MIA = "noah_brown_6181", "mia_garcia_4516"
PENDING_ORDER = "#W2611340"
SSE = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, app_env="dev", _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    return db


@pytest.fixture
async def client(server: LiveServer, shop: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as c:
        yield c


async def stream(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> list[tuple[str, str, dict[str, Any]]]:
    events = []
    async with aconnect_sse(client, "POST", path, json=body, headers={**headers, **SSE}) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            events.append((sse.event, sse.id, json.loads(sse.data)))
    return events


def hello(text: str = "Hello! How can I help?") -> Script:
    return Script([Reply.say(text)])


class TestStreamContract:
    async def test_events_come_in_order_with_increasing_ids_and_done_last(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    # paced as a model is (SSE_FRAME_MS joins tokens closer than 30 ms)
                    Reply.say(
                        "Your order is pending and on its way soon.",
                        latency=Latency(tokens_per_s=20),
                    ),
                ]
            )
        )
        events = await stream(
            client, "/threads/s1/messages", {"content": "where is my order?"}, server.headers(NOAH)
        )
        names = [e[0] for e in events]
        assert names[0] == "run" and names[-1] == "done"
        assert "tool_call" in names, events
        assert names.index("tool_call") < names.index("tool_result") < names.index("token")
        assert names.count("token") > 3  # the answer arrived in pieces
        ids = [int(e[1]) for e in events]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        tool_call = next(e[2] for e in events if e[0] == "tool_call")
        assert tool_call == {
            "id": tool_call["id"],
            "name": "get_order_details",
            "args": {"order_id": PENDING_ORDER},
            "message_id": tool_call["message_id"],  # the answer that makes the call (issue 28)
        }
        assert tool_call["message_id"]
        result = next(e[2] for e in events if e[0] == "tool_result")
        assert result["status"] == "ok" and result["name"] == "get_order_details"
        text = "".join(e[2]["text"] for e in events if e[0] == "token")
        assert text == "Your order is pending and on its way soon."
        done = events[-1][2]
        assert done["status"] == "completed" and done["checkpoint_id"]
        assert done["usage"]["input_tokens"] > 0 and done["usage"]["output_tokens"] > 0

    async def test_stream_headers_stop_proxy_buffering(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(hello())
        async with aconnect_sse(
            client,
            "POST",
            "/threads/s2/messages",
            json={"content": "hi"},
            headers={**server.headers(NOAH), **SSE},
        ) as source:
            assert source.response.headers["x-accel-buffering"] == "no"
            assert "no-cache" in source.response.headers["cache-control"]
            [e async for e in source.aiter_sse()]

    async def test_model_failure_gives_error_then_done_failed(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(lambda r: Reply.fail(500))
        events = await stream(
            client, "/threads/s3/messages", {"content": "hi"}, server.headers(NOAH)
        )
        assert [e[0] for e in events][-2:] == ["error", "done"]
        assert events[-2][2]["code"] == "model_unavailable"
        assert "Traceback" not in json.dumps(events) and "fakellm" not in json.dumps(events)
        assert events[-1][2]["status"] == "failed"

    async def test_a_failed_turn_still_counts_and_reports_what_it_saved(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        """The model fails after a tool round: the question, the call and its result are
        checkpointed, so the thread's message count and `done` must reflect them."""
        model_server.use(
            lambda r: (
                Reply.fail(500)
                if r.pending_tool_results()
                else Reply.call("get_order_details", order_id=PENDING_ORDER)
            )
        )
        h = server.headers(NOAH)
        events = await stream(client, "/threads/f1/messages", {"content": "status?"}, h)
        done = events[-1][2]
        assert done["status"] == "failed"
        state = (await client.get("/threads/f1/state", headers=h)).json()
        assert [m["role"] for m in state["messages"]] == ["user", "assistant", "tool"]
        assert done["checkpoint_id"] == state["checkpoint_id"]
        listed = (await client.get("/threads", headers=h)).json()["items"]
        assert next(i for i in listed if i["id"] == "f1")["message_count"] == 3

    async def test_interrupt_then_resume_streams_the_rest(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say("Done: your order is cancelled."),
                ]
            )
        )
        h = server.headers(NOAH)
        events = await stream(client, "/threads/w1/messages", {"content": "cancel it"}, h)
        assert [e[0] for e in events][-2:] == ["interrupt", "done"]
        (pending,) = events[-2][2]["pending"]
        assert pending["name"] == "cancel_pending_order" and PENDING_ORDER in pending["summary"]
        assert events[-1][2]["status"] == "interrupted"
        state = (await client.get("/threads/w1/state", headers=h)).json()
        assert state["pending"][0]["id"] == pending["id"]

        events = await stream(client, "/threads/w1/resume", {"decision": "approve"}, h)
        assert events[-1][2]["status"] == "completed"
        assert any(e[0] == "tool_result" and e[2]["status"] == "ok" for e in events)
        row = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert row["status"] == "cancelled"
        again = await client.post("/threads/w1/resume", json={"decision": "approve"}, headers=h)
        assert again.status_code == 409 and again.json()["error"]["code"] == "nothing_pending"


class TestJsonMode:
    async def test_post_without_sse_returns_the_turn(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(hello("Hi Noah!"))
        r = await client.post(
            "/threads/j1/messages", json={"content": "hi"}, headers=server.headers(NOAH)
        )
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "completed" and body["checkpoint_id"]
        assert [(m["role"], m["content"]) for m in body["messages"]] == [
            ("user", "hi"),
            ("assistant", "Hi Noah!"),
        ]

    async def test_the_turn_reports_the_ids_the_thread_keeps(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        """Tool results are created without ids; the run gives each one the id the state
        stores, so a client can rewind to any message the turn reported."""
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("It is pending."),
                ]
            )
        )
        h = server.headers(NOAH)
        body = (await client.post("/threads/j3/messages", json={"content": "?"}, headers=h)).json()
        reported = [(m["id"], m["role"]) for m in body["messages"]]
        assert [role for _, role in reported] == ["user", "assistant", "tool", "assistant"]
        assert all(message_id for message_id, _ in reported)
        state = (await client.get("/threads/j3/state", headers=h)).json()
        assert [(m["id"], m["role"]) for m in state["messages"]] == reported

    async def test_client_message_id_retry_adds_no_message(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(hello("first answer"))
        h = server.headers(NOAH)
        body = {"content": "hi", "client_message_id": "m-1"}
        first = (await client.post("/threads/j2/messages", json=body, headers=h)).json()
        second = (await client.post("/threads/j2/messages", json=body, headers=h)).json()
        assert first == second
        state = (await client.get("/threads/j2/state", headers=h)).json()
        assert [m["role"] for m in state["messages"]] == ["user", "assistant"]
        assert len(model_server.requests) == 1

    async def test_a_retry_after_the_process_died_mid_turn_runs_the_turn(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        """A run whose process died is still recorded as running, but no lease holds its
        thread. Its client_message_id must not answer 409 forever."""
        async with shop.connection() as conn:  # what a process that died mid-turn leaves
            await conn.execute(
                "INSERT INTO runs (run_id, thread_id, client_message_id, status)"
                " VALUES ('dead-run', %s, 'm-dead', 'running')",
                (f"{NOAH}:j5",),
            )
        model_server.use(hello("answered at last"))
        h = server.headers(NOAH)
        body = {"content": "hi", "client_message_id": "m-dead"}

        events = await stream(client, "/threads/j5/messages", body, h)
        again = (await client.post("/threads/j5/messages", json=body, headers=h)).json()

        assert events[-1][2]["status"] == "completed"
        assert again["messages"][-1]["content"] == "answered at last"  # now a plain replay
        assert len(model_server.requests) == 1
        async with shop.connection() as conn:
            cur = await conn.execute(
                "SELECT run_id, client_message_id, status FROM runs"
                " WHERE thread_id = %s ORDER BY created_at",
                (f"{NOAH}:j5",),
            )
            runs = await cur.fetchall()
        assert [(r["client_message_id"], r["status"]) for r in runs] == [
            (None, "abandoned"),
            ("m-dead", "completed"),
        ]
        assert runs[0]["run_id"] == "dead-run"

    async def test_a_run_whose_outcome_failed_to_record_once_is_recorded(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A blip while recording the outcome must not leave the run 'running': with its
        lock free it would read as abandoned, and the retry would run the turn again."""
        close_run, calls = RunRepository.close_run, []

        async def flaky(self: RunRepository, *args: Any, **kwargs: Any) -> str | None:
            calls.append(args[0])
            if len(calls) == 1:
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return await close_run(self, *args, **kwargs)

        monkeypatch.setattr(RunRepository, "close_run", flaky)
        model_server.use(hello("recorded"))
        h = server.headers(NOAH)
        body = {"content": "hi", "client_message_id": "m-blip"}

        events = await stream(client, "/threads/j6/messages", body, h)
        again = (await client.post("/threads/j6/messages", json=body, headers=h)).json()

        assert len(calls) == 2 and calls[0] == calls[1]  # the same run, recorded again
        done = events[-1][2]
        assert done["status"] == "completed" and done["checkpoint_id"] is not None
        assert again["messages"][-1]["content"] == "recorded"  # a replay, not a second turn
        assert len(model_server.requests) == 1
        async with shop.connection() as conn:
            cur = await conn.execute(
                "SELECT status FROM runs WHERE thread_id = %s", (f"{NOAH}:j6",)
            )
            assert [r["status"] for r in await cur.fetchall()] == ["completed"]


class TestOneWriterPerThread:
    async def test_second_post_while_running_gets_409_and_history_stays_linear(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [Reply.say("a slow answer " * 10, latency=Latency(ttft_ms=300, tokens_per_s=60))]
            )
        )
        h = server.headers(NOAH)

        async def late_post() -> httpx.Response:
            await asyncio.sleep(0.15)
            return await client.post(
                "/threads/busy/messages", json={"content": "me too"}, headers=h
            )

        events, late = await asyncio.gather(
            stream(client, "/threads/busy/messages", {"content": "hi"}, h), late_post()
        )
        assert events[-1][2]["status"] == "completed"
        assert late.status_code == 409
        assert late.json()["error"]["code"] == "thread_busy"
        history = (await client.get("/threads/busy/history?limit=100", headers=h)).json()["items"]
        for newer, older in itertools.pairwise(history):
            assert newer["parent_checkpoint_id"] == older["checkpoint_id"]


class TestCheckpointRoundTrips:
    async def test_a_read_only_turn_stores_its_steps_in_one_round_trip(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """agent -> tools -> agent: 5 checkpoints (input, START, agent, tools, agent) and each
        step's writes, held back until the run ends (no write asked for them), then stored
        in one round trip before `done`. Stored step by step it is 9 round trips."""
        trips = []
        execute = PostgresCheckpointer._execute

        async def counted(self: PostgresCheckpointer, batches: list[Any]) -> None:
            trips.append(len(batches))
            await execute(self, batches)

        monkeypatch.setattr(PostgresCheckpointer, "_execute", counted)
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("Ok.")])
        )
        h = server.headers(NOAH)
        events = await stream(client, "/threads/trips/messages", {"content": "status?"}, h)
        assert events[-1][2]["status"] == "completed"
        assert len(trips) == 1, trips
        assert trips[0] >= 10  # the 5 checkpoints' rows and blobs, and the steps' writes
        history = (await client.get("/threads/trips/history", headers=h)).json()["items"]
        assert len(history) == 5  # every step of the turn is there to rewind to
        assert history[0]["checkpoint_id"] == events[-1][2]["checkpoint_id"]


class TestRewind:
    async def test_rewind_by_message_id_then_post_continues_from_there(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        h = server.headers(NOAH)
        for text in ("one", "two"):
            model_server.use(hello(f"answer {text}"))
            await client.post("/threads/r1/messages", json={"content": text}, headers=h)
        state = (await client.get("/threads/r1/state", headers=h)).json()
        second_user = [m for m in state["messages"] if m["role"] == "user"][1]

        r = await client.post(
            "/threads/r1/rewind", json={"message_id": second_user["id"]}, headers=h
        )
        assert r.status_code == 200
        assert [m["content"] for m in r.json()["messages"]] == ["one", "answer one"]

        model_server.use(hello("answer edited"))
        await client.post("/threads/r1/messages", json={"content": "two, edited"}, headers=h)
        state = (await client.get("/threads/r1/state", headers=h)).json()
        assert [m["content"] for m in state["messages"]] == [
            "one",
            "answer one",
            "two, edited",
            "answer edited",
        ]
        # the earlier branch is still readable in history
        history = (await client.get("/threads/r1/history?limit=200", headers=h)).json()["items"]
        assert any(
            item["last_message"] and item["last_message"]["content"] == "answer two"
            for item in history
        )

    async def test_rewind_finds_a_message_pages_back_in_history(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        # History is read a page of HISTORY_PAGE checkpoints at a time (a turn is 3 to 5):
        # the first message of a longer thread is found on a later page.
        h = server.headers(NOAH)
        texts = [f"message {i}" for i in range(HISTORY_PAGE)]  # 3 checkpoints a turn
        for text in texts:
            model_server.use(hello(f"answer to {text}"))
            await client.post("/threads/pages/messages", json={"content": text}, headers=h)
        history = (await client.get("/threads/pages/history?limit=200", headers=h)).json()
        assert len(history["items"]) > 2 * HISTORY_PAGE
        state = (await client.get("/threads/pages/state", headers=h)).json()
        second = [m for m in state["messages"] if m["role"] == "user"][1]
        r = await client.post("/threads/pages/rewind", json={"message_id": second["id"]}, headers=h)
        assert r.status_code == 200
        assert [m["content"] for m in r.json()["messages"]] == ["message 0", "answer to message 0"]

    async def test_rewind_by_checkpoint_id(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        h = server.headers(NOAH)
        model_server.use(hello("first"))
        first = (await client.post("/threads/r2/messages", json={"content": "a"}, headers=h)).json()
        model_server.use(hello("second"))
        await client.post("/threads/r2/messages", json={"content": "b"}, headers=h)
        r = await client.post(
            "/threads/r2/rewind", json={"checkpoint_id": first["checkpoint_id"]}, headers=h
        )
        assert [m["content"] for m in r.json()["messages"]] == ["a", "first"]
        model_server.use(hello("third"))
        await client.post("/threads/r2/messages", json={"content": "c"}, headers=h)
        state = (await client.get("/threads/r2/state", headers=h)).json()
        assert [m["content"] for m in state["messages"]] == ["a", "first", "c", "third"]


class TestThreads:
    async def test_create_list_and_delete(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        h = server.headers(MIA)
        created = await client.post("/threads", headers=h)
        assert created.status_code == 201
        sid = created.json()["id"]
        model_server.use(hello())
        await client.post(
            f"/threads/{sid}/messages", json={"content": "Where is my parcel?"}, headers=h
        )
        for _ in range(3):
            await client.post("/threads", headers=h)
            await asyncio.sleep(0.01)
        page = (await client.get("/threads?limit=2", headers=h)).json()
        assert len(page["items"]) == 2 and page["next_cursor"]
        rest = (
            await client.get(f"/threads?limit=10&cursor={page['next_cursor']}", headers=h)
        ).json()
        items = page["items"] + rest["items"]
        assert len(items) == 4 and len({i["id"] for i in items}) == 4
        mine = next(i for i in items if i["id"] == sid)
        assert mine["title"] == "Where is my parcel?" and mine["message_count"] == 2

        async with shop.connection() as conn:  # as if a summary had archived a message
            await conn.execute(
                "INSERT INTO transcript_archive (thread_id, seq, message) VALUES (%s, 0, '{}')",
                (f"{MIA}:{sid}",),
            )
        assert (await client.delete(f"/threads/{sid}", headers=h)).status_code == 204
        archived = await fetch_one(
            shop,
            "SELECT count(*) AS n FROM transcript_archive WHERE thread_id = %s",
            f"{MIA}:{sid}",
        )
        assert archived["n"] == 0
        assert (await client.get(f"/threads/{sid}/state", headers=h)).status_code == 404
        assert (await client.get(f"/threads/{sid}/history", headers=h)).status_code == 404


class TestIsolation:
    ROUTES: ClassVar[list[tuple[str, str, dict[str, Any] | None]]] = [
        ("GET", "/threads/{sid}/state", None),
        ("GET", "/threads/{sid}/history", None),
        ("POST", "/threads/{sid}/resume", {"decision": "approve"}),
        ("POST", "/threads/{sid}/rewind", {"checkpoint_id": "x"}),
        ("DELETE", "/threads/{sid}", None),
    ]

    @pytest.mark.parametrize(("method", "path", "body"), ROUTES)
    async def test_other_users_thread_is_indistinguishable_from_a_missing_one(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        method: str,
        path: str,
        body: dict[str, Any] | None,
    ) -> None:
        owner = server.headers(NOAH)
        model_server.use(hello("private to noah"))
        await client.post("/threads/secret/messages", json={"content": "my secret"}, headers=owner)
        before = (await client.get("/threads/secret/state", headers=owner)).json()

        for intruder in (server.headers(MIA), server.headers("guest-" + NOAH, role="guest")):
            theirs = await client.request(
                method, path.format(sid="secret"), json=body, headers=intruder
            )
            missing = await client.request(
                method, path.format(sid="nothere"), json=body, headers=intruder
            )
            assert theirs.status_code == missing.status_code == 404
            assert theirs.json() == missing.json()

        after = (await client.get("/threads/secret/state", headers=owner)).json()
        assert after == before

    async def test_posting_to_someone_elses_session_id_starts_a_separate_thread(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(hello("for noah"))
        await client.post(
            "/threads/shared/messages", json={"content": "noah"}, headers=server.headers(NOAH)
        )
        model_server.use(hello("for mia"))
        await client.post(
            "/threads/shared/messages", json={"content": "mia"}, headers=server.headers(MIA)
        )
        noah = (await client.get("/threads/shared/state", headers=server.headers(NOAH))).json()
        assert [m["content"] for m in noah["messages"]] == ["noah", "for noah"]
        titles = (await client.get("/threads", headers=server.headers(MIA))).json()["items"]
        assert [t["title"] for t in titles] == ["mia"]


class TestErrors:
    async def test_auth_failures_are_401_with_bearer_challenge(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        expired = server.token(NOAH, ttl_s=-10)
        # a correctly signed guest token claiming a customer's subject
        forged_guest = jwt.encode(
            {"sub": NOAH, "role": "guest", "exp": int(time.time()) + 60},
            server.settings.jwt_secret.get_secret_value(),
            algorithm="HS256",
        )
        for headers in (
            {},
            {"Authorization": "Basic abc"},
            {"Authorization": "Bearer not-a-jwt"},
            {"Authorization": f"Bearer {expired}"},
            {"Authorization": "Bearer " + server.token(NOAH)[:-3] + "abc"},
            {"Authorization": "Bearer " + forged_guest},
        ):
            r = await client.get("/threads", headers=headers)
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"]["code"] == "unauthorized"

    async def test_the_turn_routes_authenticate_before_they_validate(
        self, client: httpx.AsyncClient
    ) -> None:
        # Their thread is built in the route, not by a dependency (app/api/routes/messages.py):
        # a caller without a valid token still learns nothing from the shape of its request.
        for path in ("/threads/bad:id/messages", "/threads/ok/messages", "/threads/ok/resume"):
            for headers in ({}, {"Authorization": "Bearer not-a-jwt"}):
                r = await client.post(path, json={"content": "", "decision": 1}, headers=headers)
                assert r.status_code == 401, (path, r.text)
                assert r.json()["error"]["code"] == "unauthorized"

    async def test_validation_and_size_and_type_errors(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        h = server.headers(NOAH)
        cases = [
            (await client.get("/threads/bad:id/state", headers=h), 422),
            (await client.get("/threads/" + "x" * 65 + "/state", headers=h), 422),
            (await client.post("/threads/ok/messages", json={"content": "   "}, headers=h), 422),
            (
                await client.post("/threads/ok/messages", json={"content": "x" * 8001}, headers=h),
                422,
            ),
            (await client.post("/threads/ok/messages", json={}, headers=h), 422),
            (await client.post("/threads/ok/resume", json={"decision": "maybe"}, headers=h), 422),
            (await client.post("/threads/ok/messages", content=b"hi", headers=h), 415),
            (
                await client.post(
                    "/threads/ok/messages",
                    content=json.dumps({"content": "x" * 70_000}).encode(),
                    headers={**h, "Content-Type": "application/json"},
                ),
                413,
            ),
        ]
        for response, status in cases:
            assert response.status_code == status, response.text
            error = response.json()["error"]
            assert error["code"] and error["message"]
            assert "Traceback" not in response.text

    async def test_health_and_readiness(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ok"

    async def test_openapi_documents_the_routes(self, client: httpx.AsyncClient) -> None:
        spec = (await client.get("/openapi.json")).json()
        assert "/threads/{session_id}/messages" in spec["paths"]
        assert (await client.get("/docs")).status_code == 200


class TestDisconnect:
    async def test_disconnect_mid_stream_then_next_message_succeeds(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.say("word " * 60, latency=Latency(tokens_per_s=100)),
                    Reply.say("second answer"),
                ]
            )
        )
        h = server.headers(NOAH)
        async with aconnect_sse(
            client,
            "POST",
            "/threads/dc/messages",
            json={"content": "long please"},
            headers={**h, **SSE},
        ) as source:
            async for sse in source.aiter_sse():
                if sse.event == "token":
                    break  # the client goes away mid-answer
        deadline = time.monotonic() + 10
        while True:
            r = await client.post("/threads/dc/messages", json={"content": "again"}, headers=h)
            if r.status_code != 409 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200, r.text
        state = (await client.get("/threads/dc/state", headers=h)).json()
        assert [m["role"] for m in state["messages"]] == ["user", "assistant", "user", "assistant"]
        assert state["messages"][1]["content"].startswith("word word")


@pytest.fixture
async def reads_refund_article(
    shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer
) -> None:
    """The help centre synced, and a model that reads one article before it answers."""
    from app.help.repository import sync_help_articles

    await sync_help_articles(shop)
    model_server.use(
        Script(
            [
                Reply.call("get_help_article", article_id="refund-timing"),
                Reply.say("Card refunds take a few business days [refund-timing]."),
            ]
        )
    )


@pytest.mark.usefixtures("reads_refund_article")
class TestCitationsEvent:
    async def test_policy_answer_sends_citations_before_done(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        h = server.headers(NOAH)
        events = await stream(client, "/threads/cite/messages", {"content": "refund time?"}, h)
        names = [e[0] for e in events]
        assert names[-2:] == ["citations", "done"]
        (citation,) = events[-2][2]["citations"]
        assert citation["id"] == "refund-timing" and citation["title"]
        state = (await client.get("/threads/cite/state", headers=h)).json()
        assert [c["id"] for c in state["citations"]] == ["refund-timing"]
        page = await client.get("/help/refund-timing")
        assert page.status_code == 200 and citation["title"] in page.text

    async def test_a_retried_message_replays_its_citations(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
    ) -> None:
        h = server.headers(NOAH)
        body = {"content": "refund time?", "client_message_id": "cite-1"}
        live = await stream(client, "/threads/cite2/messages", body, h)
        replayed = await stream(client, "/threads/cite2/messages", body, h)
        as_json = (await client.post("/threads/cite2/messages", json=body, headers=h)).json()

        assert len(model_server.requests) == 2  # the retries ran nothing
        live_cited = [e[2] for e in live if e[0] == "citations"]
        assert live_cited and [e[2] for e in replayed if e[0] == "citations"] == live_cited
        assert [e[0] for e in replayed][-2:] == ["citations", "done"]
        assert as_json["citations"] == live_cited[0]["citations"]


class TestMemory:
    async def test_preference_is_remembered_injected_listed_and_forgotten(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
    ) -> None:
        h = server.headers(NOAH)
        await client.delete("/me/memory/refund_preference", headers=h)
        model_server.use(
            Script(
                [
                    Reply.call("remember_preference", key="refund_preference", value="gift card"),
                    Reply.say("Noted: refunds to your gift card."),
                ]
            )
        )
        await client.post(
            "/threads/mem1/messages",
            json={"content": "always refund to my gift card please"},
            headers=h,
        )
        # the next turn's prompt carries the preference, in a brand new thread too
        model_server.use(hello("Hi!"))
        await client.post("/threads/mem2/messages", json={"content": "hi"}, headers=h)
        prompt = model_server.requests[-1].system_prompt
        assert 'refund_preference: "gift card"' in prompt

        listed = (await client.get("/me/memory", headers=h)).json()
        assert [(p["key"], p["value"]) for p in listed] == [("refund_preference", "gift card")]

        # another customer sees nothing of it, and cannot delete it
        mia = server.headers(MIA)
        assert (await client.get("/me/memory", headers=mia)).json() == []
        assert (await client.delete("/me/memory/refund_preference", headers=mia)).status_code == 404
        model_server.use(hello("Hello Mia"))
        await client.post("/threads/mem3/messages", json={"content": "hi"}, headers=mia)
        assert "refund_preference" not in model_server.requests[-1].system_prompt

        assert (await client.delete("/me/memory/refund_preference", headers=h)).status_code == 204
        assert (await client.get("/me/memory", headers=h)).json() == []

    async def test_unverified_guest_cannot_store_memory(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
    ) -> None:
        guest = server.headers("guest-abc", role="guest")
        model_server.use(
            Script(
                [
                    Reply.call("remember_preference", key="language", value="Chinese"),
                    Reply.say("ok"),
                ]
            )
        )
        r = await client.post(
            "/threads/g1/messages", json={"content": "answer in Chinese"}, headers=guest
        )
        tool = next(m for m in r.json()["messages"] if m["role"] == "tool")
        assert tool["content"].startswith("Error:")
        assert (await client.get("/me/memory", headers=guest)).json() == []


class TestMetrics:
    async def test_metrics_count_runs_tokens_and_tool_results(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        def value(text: str, series: str) -> float:
            line = next((ln for ln in text.splitlines() if ln.startswith(series + " ")), None)
            return float(line.split()[-1]) if line else 0.0

        def total(text: str, prefix: str) -> float:  # every series of a metric that matches
            return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix))

        before = (await client.get("/metrics")).text
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("It is pending."),
                ]
            )
        )
        await client.post(
            "/threads/m1/messages", json={"content": "status?"}, headers=server.headers(NOAH)
        )
        after = (await client.get("/metrics")).text
        runs = 'cs_agent_runs_total{status="completed"}'
        oks = 'cs_agent_tool_results_total{status="ok"}'
        tokens = 'cs_agent_model_tokens_total{direction="input",model='  # any model
        assert value(after, runs) == value(before, runs) + 1
        assert value(after, oks) == value(before, oks) + 1
        assert total(after, tokens) > total(before, tokens)
        assert "# TYPE cs_agent_runs_total counter" in after

    async def test_busy_refusals_are_counted_for_every_kind_of_request(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        def busy(text: str) -> float:
            series = "cs_agent_thread_busy_total "
            line = next((ln for ln in text.splitlines() if ln.startswith(series)), None)
            return float(line.split()[-1]) if line else 0.0

        model_server.use(
            Script(
                [Reply.say("a slow answer " * 10, latency=Latency(ttft_ms=300, tokens_per_s=60))]
            )
        )
        h = server.headers(NOAH)
        before = (await client.get("/metrics")).text

        async def refused() -> list[httpx.Response]:
            await asyncio.sleep(0.15)
            return [
                await client.post("/threads/mb/messages", json={"content": "again"}, headers=h),
                await client.post("/threads/mb/rewind", json={"checkpoint_id": "x"}, headers=h),
                await client.delete("/threads/mb", headers=h),
            ]

        events, responses = await asyncio.gather(
            stream(client, "/threads/mb/messages", {"content": "hi"}, h), refused()
        )
        assert events[-1][2]["status"] == "completed"
        assert [r.json()["error"]["code"] for r in responses] == ["thread_busy"] * 3
        after = (await client.get("/metrics")).text
        assert busy(after) == busy(before) + 3  # the post, the rewind and the delete
