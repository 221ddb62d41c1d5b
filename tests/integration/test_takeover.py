"""Human takeover over real HTTP: a handoff queues the thread, one person accepts, the
customer's messages while held reach no model, the person answers in the thread and hands
back with a note the agent reads; staff routes are 404 for everyone else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from psycopg_pool import AsyncConnectionPool

from app.api.auth import issue_token
from app.config import Settings
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
ALICE, BOB = "staff-alice", "staff-bob"


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, write_confirmation="off", _env_file=None
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


def staff(server: LiveServer, user: str, name: str) -> dict[str, str]:
    secret = server.settings.jwt_secret.get_secret_value()
    return {"Authorization": f"Bearer {issue_token(secret, user, role='staff', name=name)}"}


async def hand_off(
    client: httpx.AsyncClient, server: LiveServer, model: ScriptedModelServer, session: str
) -> str:
    model.use(
        Script(
            [
                Reply.call("transfer_to_human_agents", summary="wants a person about a refund"),
                Reply.say("I have transferred you to a colleague."),
            ]
        )
    )
    h = server.headers(NOAH)
    posted = await client.post(
        f"/threads/{session}/messages", json={"content": "a human please"}, headers=h
    )
    assert posted.status_code == 200 and posted.json()["status"] == "completed"
    return f"{NOAH}:{session}"


async def control(client: httpx.AsyncClient, thread: str, h: dict[str, str]) -> dict[str, Any]:
    got = await client.get(f"/staff/threads/{thread}", headers=h)
    assert got.status_code == 200, got.text
    control: dict[str, Any] = got.json()["control"]
    return control


class TestHandoffAndAccept:
    async def test_a_handoff_queues_the_thread_and_one_of_two_accepts_wins(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        thread = await hand_off(client, server, scripted_model_session, "take-1")
        alice, bob = staff(server, ALICE, "Alice"), staff(server, BOB, "Bob")
        queued = (await client.get("/staff/threads?control=queued", headers=alice)).json()
        item = next(i for i in queued["items"] if i["thread_id"] == thread)
        assert item["summary"] == "wants a person about a refund" and item["state"] == "queued"

        body = {"action": "accept", "version": item["version"]}
        answers = await asyncio.gather(
            client.post(f"/staff/threads/{thread}/control", json=body, headers=alice),
            client.post(f"/staff/threads/{thread}/control", json=body, headers=bob),
        )
        assert sorted(a.status_code for a in answers) == [200, 409]
        loser = next(a for a in answers if a.status_code == 409)
        assert loser.json()["error"]["code"] == "control_conflict"
        held = await control(client, thread, alice)
        assert held["state"] == "human" and held["assignee"] in (ALICE, BOB)
        assert held["version"] == item["version"] + 1

    async def test_a_customer_message_while_queued_reaches_no_model_and_is_stored_once(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await hand_off(client, server, scripted_model_session, "take-2")
        scripted_model_session.use(Script([Reply.say("the agent must not say this")]))
        h = server.headers(NOAH)
        body = {"content": "still there?", "client_message_id": "m-held"}
        first = await client.post("/threads/take-2/messages", json=body, headers=h)
        again = await client.post("/threads/take-2/messages", json=body, headers=h)
        async with aconnect_sse(
            client,
            "POST",
            "/threads/take-2/messages",
            json=body,
            headers={**h, "Accept": "text/event-stream"},
        ) as source:
            events = [(e.event, e.json()) async for e in source.aiter_sse()]

        assert first.status_code == 200 and first.json()["status"] == "handed_off"
        assert first.json()["control"]["state"] == "queued"
        assert again.json()["run_id"] == first.json()["run_id"]
        assert [name for name, _ in events] == ["run", "stored", "done"]
        assert events[-1][1]["status"] == "handed_off"
        assert scripted_model_session.requests == []  # no model call at all
        state = (await client.get("/threads/take-2/state", headers=h)).json()
        held = [m for m in state["messages"] if m["content"] == "still there?"]
        assert len(held) == 1 and held[0]["author"] == "customer"

    async def test_the_langgraph_api_refuses_a_run_on_a_held_thread(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await hand_off(client, server, scripted_model_session, "take-3")
        h = {"X-Api-Key": server.token(NOAH)}
        threads = await client.post("/lg/threads/search", json={"limit": 50}, headers=h)
        lg_id = next(
            t["thread_id"]
            for t in threads.json()
            if t["metadata"].get("session_id") in (None, "take-3")
        )
        refused = await client.post(
            f"/lg/threads/{lg_id}/runs/wait",
            json={
                "assistant_id": "agent",
                "input": {"messages": [{"role": "user", "content": "hi"}]},
            },
            headers=h,
        )
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "human_in_control"


class TestPersonInTheThread:
    async def test_the_person_answers_and_hands_back_and_the_agent_reads_the_note(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        thread = await hand_off(client, server, scripted_model_session, "take-4")
        alice, bob = staff(server, ALICE, "Alice"), staff(server, BOB, "Bob")
        version = (await control(client, thread, alice))["version"]
        await client.post(
            f"/staff/threads/{thread}/control",
            json={"action": "accept", "version": version},
            headers=alice,
        )
        said = await client.post(
            f"/staff/threads/{thread}/messages",
            json={"content": "Hi Noah, I refunded you."},
            headers=alice,
        )
        not_holder = await client.post(
            f"/staff/threads/{thread}/messages", json={"content": "me too"}, headers=bob
        )
        stale = await client.post(
            f"/staff/threads/{thread}/control",
            json={"action": "release", "version": version},
            headers=alice,
        )
        released = await client.post(
            f"/staff/threads/{thread}/control",
            json={"action": "release", "version": version + 1, "note": "refund of 20 EUR done"},
            headers=alice,
        )
        scripted_model_session.use(Script([Reply.say("Glad it is sorted.")]))
        answer = await client.post(
            "/threads/take-4/messages", json={"content": "thanks!"}, headers=server.headers(NOAH)
        )

        assert said.status_code == 200 and said.json()["name"] == "Alice"
        assert not_holder.status_code == 409 and stale.status_code == 409
        assert released.status_code == 200 and released.json()["state"] == "agent"
        assert answer.json()["status"] == "completed"
        (request,) = scripted_model_session.requests
        seen = " ".join(str(m.get("content")) for m in request.messages)
        assert "Alice (support team) wrote to the customer" in seen and "I refunded you" in seen
        assert "refund of 20 EUR done" in seen
        state = (await client.get("/threads/take-4/state", headers=server.headers(NOAH))).json()
        authors = [
            (m.get("author"), m.get("name")) for m in state["messages"] if m["role"] == "user"
        ]
        assert ("staff", "Alice") in authors
        history = (await client.get(f"/staff/threads/{thread}", headers=alice)).json()[
            "control_history"
        ]
        assert [h["action"] for h in history] == ["handoff", "accept", "release"]

    async def test_after_a_hand_back_the_model_is_no_longer_told_a_person_has_it(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        thread = await hand_off(client, server, scripted_model_session, "take-back")
        alice, h = staff(server, ALICE, "Alice"), server.headers(NOAH)
        handed = (await client.get("/threads/take-back/state", headers=h)).json()
        for action in ("accept", "release"):  # a release without a note
            version = (await control(client, thread, alice))["version"]
            changed = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": action, "version": version},
                headers=alice,
            )
            assert changed.status_code == 200, changed.text
        released = (await client.get("/threads/take-back/state", headers=h)).json()
        scripted_model_session.use(Script([Reply.say("You have two orders.")]))
        answer = await client.post(
            "/threads/take-back/messages", json={"content": "what are my orders?"}, headers=h
        )

        assert handed["handed_off"] is True and released["handed_off"] is False
        assert answer.json()["status"] == "completed"
        (request,) = scripted_model_session.requests
        system = str(request.messages[0].get("content"))
        assert request.messages[0].get("role") == "system"
        assert "handed to a human" not in system

    async def test_staff_routes_are_404_for_customers_and_guests(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        thread = await hand_off(client, server, scripted_model_session, "take-5")
        for h in (server.headers(NOAH), server.headers("guest-x1", role="guest")):
            for method, path in (
                ("GET", "/staff/threads"),
                ("GET", f"/staff/threads/{thread}"),
                ("POST", f"/staff/threads/{thread}/control"),
                ("POST", f"/staff/threads/{thread}/messages"),
            ):
                answer = await client.request(
                    method, path, headers=h, json={"action": "accept", "version": 0}
                )
                assert answer.status_code == 404, (method, path)


def metric(text: str, name: str) -> float:
    rows = [r for r in text.splitlines() if r.startswith(name + " ") or r.startswith(name + "{")]
    return sum(float(r.rsplit(" ", 1)[1]) for r in rows)


class TestMetrics:
    async def test_queue_length_handoffs_time_to_accept_and_time_held(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        before = (await client.get("/metrics")).text
        thread = await hand_off(client, server, scripted_model_session, "take-6")
        queued = (await client.get("/metrics")).text
        alice = staff(server, ALICE, "Alice")
        version = (await control(client, thread, alice))["version"]
        for action, v in (("accept", version), ("release", version + 1)):
            answer = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": action, "version": v},
                headers=alice,
            )
            assert answer.status_code == 200
        after = (await client.get("/metrics")).text

        assert metric(queued, "cs_agent_handoff_queue_length") >= 1
        handoffs = "cs_agent_handoffs_total"
        assert metric(queued, handoffs) == metric(before, handoffs) + 1
        for histogram in ("time_to_accept", "time_held"):
            name = f"cs_agent_handoff_{histogram}_seconds_count"
            assert metric(after, name) == metric(before, name) + 1
        assert (
            metric(after, "cs_agent_handoff_queue_length")
            == metric(queued, "cs_agent_handoff_queue_length") - 1
        )


class TestTakeOver:
    async def test_a_take_over_stops_the_agents_run_in_progress(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        """A supervisor joins a conversation the agent is answering: the run is cancelled
        where it is, the thread is theirs, and the customer's next message reaches no model."""
        words = " ".join(f"word{i}" for i in range(200))
        scripted_model_session.use(Script([Reply.say(words)]), latency=Latency(tokens_per_s=20))
        h = server.headers(NOAH)
        posting = asyncio.create_task(
            client.post("/threads/take-7/messages", json={"content": "hi"}, headers=h)
        )
        thread = f"{NOAH}:take-7"
        alice = staff(server, ALICE, "Alice")
        for _ in range(100):  # until the run is under way
            if scripted_model_session.requests:
                break
            await asyncio.sleep(0.05)
        version = (await control(client, thread, alice))["version"]
        taken = await client.post(
            f"/staff/threads/{thread}/control",
            json={"action": "take_over", "version": version},
            headers=alice,
        )
        answer = await posting
        scripted_model_session.use(Script([Reply.say("must not be said")]), latency=Latency())
        after = await client.post("/threads/take-7/messages", json={"content": "?"}, headers=h)

        assert taken.status_code == 200 and taken.json()["state"] == "human"
        assert taken.json()["assignee"] == ALICE and taken.json()["reason"] == "taken over"
        assert answer.json()["status"] == "cancelled"
        assert after.json()["status"] == "handed_off"
        assert scripted_model_session.requests == []


class TestControlObject:
    async def test_customer_and_staff_read_the_control_object_and_its_history(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        thread = await hand_off(client, server, scripted_model_session, "take-8")
        h, alice = server.headers(NOAH), staff(server, ALICE, "Alice")
        mine = (await client.get("/threads/take-8/control", headers=h)).json()
        theirs = (await client.get(f"/staff/threads/{thread}/control", headers=alice)).json()
        state = (await client.get("/threads/take-8/state", headers=h)).json()
        other = await client.get(
            "/threads/take-8/control", headers=server.headers("mia_garcia_4516")
        )
        await client.post(
            f"/staff/threads/{thread}/control",
            json={"action": "accept", "version": mine["version"]},
            headers=alice,
        )
        moved = await client.post(
            f"/staff/threads/{thread}/control",
            json={"action": "transfer", "version": mine["version"] + 1, "to": BOB},
            headers=alice,
        )
        history = (await client.get(f"/staff/threads/{thread}", headers=alice)).json()

        assert mine == theirs == state["control"]
        assert mine["state"] == "queued" and mine["summary"] == "wants a person about a refund"
        assert other.status_code == 404
        assert moved.json()["assignee"] == BOB and moved.json()["state"] == "human"
        steps = [(e["action"], e["from"], e["to"]) for e in history["control_history"]]
        assert steps == [
            ("handoff", "agent", "queued"),
            ("accept", "queued", "human"),
            ("transfer", "human", "human"),
        ]
        assert [e["actor"] for e in history["control_history"]] == ["agent", ALICE, ALICE]
        # The names the staff signed in with, as the customer sees them ("Alice joined").
        names = [(e["actor_name"], e["assignee_name"]) for e in history["control_history"]]
        assert names == [(None, None), ("Alice", "Alice"), ("Alice", BOB)]
