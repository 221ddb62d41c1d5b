"""The official Python `langgraph-sdk` against cs-agent's `/lg` surface: a real uvicorn,
real Postgres, the model scripted at its HTTP boundary. Nothing of ours is mocked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import (
    APIStatusError,
    ConflictError,
    NotFoundError,
    UnprocessableEntityError,
)
from psycopg_pool import AsyncConnectionPool

from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import fetch_one, load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH, MIA = "noah_brown_6181", "mia_garcia_4516"
PENDING_ORDER = "#W2611340"
ALL_MODES = ["values", "messages-tuple", "updates", "custom"]
LONG = " ".join(f"word{i}" for i in range(60))


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    return db


def sdk(server: LiveServer, user: str = NOAH) -> LangGraphClient:
    """The client as a frontend builds it: base URL ending in /lg, the JWT as the API key."""
    return get_client(url=f"{server.url}/lg", api_key=server.token(user))


@pytest.fixture
async def noah(server: LiveServer, shop: Any) -> AsyncIterator[LangGraphClient]:
    client = sdk(server)
    yield client
    await client.aclose()


def cancel_order_script() -> Script:
    return Script(
        [
            Reply.call("cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"),
            Reply.say("Done: your order is cancelled."),
        ]
    )


async def parts(stream: AsyncIterator[Any]) -> list[tuple[str, Any, str | None]]:
    return [(p.event, p.data, p.id) for p in [part async for part in stream]]


def texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in messages]


class TestRoundTrip:
    async def test_create_stream_interrupt_resume_history_edit_delete(
        self,
        noah: LangGraphClient,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        thread = await noah.threads.create()
        thread_id = thread["thread_id"]
        assert thread["status"] == "idle" and len(thread_id) == 36

        model_server.use(cancel_order_script())
        events = await parts(
            noah.runs.stream(
                thread_id,
                "agent",
                input={"messages": [{"type": "human", "content": "cancel my order please"}]},
                stream_mode=ALL_MODES,
            )
        )
        names = [e[0] for e in events]
        assert names[0] == "metadata" and names[1] == "values"
        run_id = events[0][1]["run_id"]
        assert events[1][1]["messages"][-1]["content"] == "cancel my order please"
        assert "updates" in names and "custom" in names
        assert names[-1] == "values" and "__interrupt__" in events[-1][1]
        (interrupt,) = events[-1][1]["__interrupt__"]
        (request,) = interrupt["value"]["action_requests"]
        assert request["name"] == "cancel_pending_order"
        assert PENDING_ORDER in request["description"]
        assert interrupt["value"]["review_configs"][0]["allowed_decisions"] == [
            "approve",
            "reject",
        ]
        assert interrupt["value"]["pending"][0]["args"]["order_id"] == PENDING_ORDER

        assert (await noah.threads.get(thread_id))["status"] == "interrupted"
        assert (await noah.runs.get(thread_id, run_id))["status"] == "success"
        state = await noah.threads.get_state(thread_id)
        assert state["tasks"][0]["interrupts"][0]["id"] == interrupt["id"]
        assert state["interrupts"][0]["value"]["action_requests"] == [request]
        assert set(state["values"]) == {"messages"}  # nothing internal

        model_server.use(Script([Reply.say("Done: your order is cancelled.")]))
        resumed = await parts(
            noah.runs.stream(
                thread_id,
                "agent",
                command={"resume": {"decisions": [{"type": "approve"}]}},
                stream_mode=["values", "messages-tuple"],
            )
        )
        final = [e for e in resumed if e[0] == "values"][-1][1]
        assert texts(final["messages"])[-1] == ("ai", "Done: your order is cancelled.")
        assert "__interrupt__" not in final
        chunks = "".join(e[1][0]["content"] for e in resumed if e[0] == "messages")
        assert "Done: your order is cancelled." in chunks
        row = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert row["status"] == "cancelled"
        assert (await noah.threads.get(thread_id))["status"] == "idle"

        history = await noah.threads.get_history(thread_id, limit=50)
        assert (
            history[0]["checkpoint"]["checkpoint_id"]
            == (await noah.threads.get_state(thread_id))["checkpoint"]["checkpoint_id"]
        )
        first_human = final["messages"][0]["id"]
        first_seen = [
            s for s in history if first_human in [m["id"] for m in s["values"].get("messages", [])]
        ][-1]
        parent = first_seen["parent_checkpoint"]
        assert parent is not None

        model_server.use(Script([Reply.say("Your orders are on their way.")]))
        edited = await noah.runs.wait(
            thread_id,
            "agent",
            input={"messages": [{"type": "human", "content": "where are my orders?"}]},
            checkpoint=parent,
        )
        assert texts(edited["messages"]) == [
            ("human", "where are my orders?"),
            ("ai", "Your orders are on their way."),
        ]
        longer = await noah.threads.get_history(thread_id, limit=200)
        assert len(longer) > len(history)  # a fork: the old branch stays in history

        await noah.threads.delete(thread_id)
        with pytest.raises(NotFoundError):
            await noah.threads.get(thread_id)

    async def test_a_declined_confirmation_changes_nothing(
        self,
        noah: LangGraphClient,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        thread_id = (await noah.threads.create())["thread_id"]
        model_server.use(cancel_order_script())
        await noah.runs.wait(
            thread_id, "agent", input={"messages": [{"role": "user", "content": "cancel it"}]}
        )
        model_server.use(Script([Reply.say("Alright, I left it as it is.")]))
        # approve one, reject another: anything but all-approve declines the turn
        result = await noah.runs.wait(
            thread_id,
            "agent",
            command={"resume": {"decisions": [{"type": "approve"}, {"type": "reject"}]}},
        )
        assert result["messages"][-1]["content"] == "Alright, I left it as it is."
        row = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert row["status"] == "pending"


class TestRejoin:
    async def test_a_dropped_stream_rejoins_after_its_last_event_id(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say(LONG)]), latency=Latency(tokens_per_s=40))
        thread_id = (await noah.threads.create())["thread_id"]
        seen: list[tuple[str, Any, str | None]] = []
        stream = noah.runs.stream(
            thread_id,
            "agent",
            input={"messages": [{"type": "human", "content": "talk"}]},
            stream_mode=["values", "messages-tuple"],
            stream_resumable=True,
        )
        async for part in stream:
            seen.append((part.event, part.data, part.id))
            if sum(e[0] == "messages" for e in seen) >= 3:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        run_id = seen[0][1]["run_id"]
        last_id = seen[-1][2]
        assert last_id is not None
        rest = await parts(noah.runs.join_stream(thread_id, run_id, last_event_id=last_id))
        ids = [e[2] for e in seen + rest]
        assert len(ids) == len(set(ids))  # no event twice
        text = "".join(e[1][0]["content"] for e in seen + rest if e[0] == "messages")
        assert text == LONG
        assert rest[-1][0] == "values" and rest[-1][1]["messages"][-1]["content"] == LONG
        # the whole run again, from the start ("-1"), once it has ended
        # (pieces that were sent one by one come back merged: the same text, fewer frames)
        again = await parts(noah.runs.join_stream(thread_id, run_id, last_event_id="-1"))
        assert [e[0] for e in again][:2] == ["metadata", "values"]
        assert "".join(e[1][0]["content"] for e in again if e[0] == "messages") == LONG
        assert again[-1] == rest[-1]


class TestCancel:
    async def test_a_background_run_is_cancelled_and_the_thread_goes_on(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say(LONG)]), latency=Latency(tokens_per_s=20))
        thread_id = (await noah.threads.create())["thread_id"]
        run = await noah.runs.create(
            thread_id, "agent", input={"messages": [{"type": "human", "content": "talk"}]}
        )
        await asyncio.sleep(0.4)
        assert (await noah.threads.get(thread_id))["status"] == "busy"
        with pytest.raises(ConflictError):  # one writer per thread: multitask 'reject'
            await noah.runs.create(
                thread_id, "agent", input={"messages": [{"type": "human", "content": "hi"}]}
            )
        await noah.runs.cancel(thread_id, run["run_id"])
        values = await noah.runs.join(thread_id, run["run_id"])
        assert values["messages"][-1]["type"] == "ai"
        assert (await noah.runs.get(thread_id, run["run_id"]))["status"] == "interrupted"
        model_server.use(Script([Reply.say("Still here.")]), latency=Latency())
        after = await noah.runs.wait(
            thread_id, "agent", input={"messages": [{"type": "human", "content": "hi"}]}
        )
        assert after["messages"][-1]["content"] == "Still here."


class TestIsolation:
    async def test_another_customers_thread_is_not_found(
        self, server: LiveServer, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hello Noah.")]))
        thread_id = (await noah.threads.create())["thread_id"]
        await noah.runs.wait(
            thread_id, "agent", input={"messages": [{"type": "human", "content": "hi"}]}
        )
        mia = sdk(server, MIA)
        try:
            for call in (
                mia.threads.get(thread_id),
                mia.threads.get_state(thread_id),
                mia.threads.get_history(thread_id),
                mia.runs.create(thread_id, "agent", input={"messages": [{"content": "hi"}]}),
                mia.runs.list(thread_id),
                mia.threads.delete(thread_id),
            ):
                with pytest.raises(NotFoundError):
                    await call
            with pytest.raises(httpx.HTTPStatusError) as wait:  # wait/join raise httpx's own
                await mia.runs.wait(thread_id, "agent", input={"messages": [{"content": "hi"}]})
            assert wait.value.response.status_code == 404
            assert thread_id not in [t["thread_id"] for t in await mia.threads.search()]
            assert thread_id in [t["thread_id"] for t in await noah.threads.search()]
        finally:
            await mia.aclose()


class TestRefusals:
    @pytest.mark.parametrize(
        ("options", "code"),
        [
            ({"config": {"configurable": {"user_id": "someone_else"}}}, "config_unsupported"),
            ({"context": {"user_id": "someone_else"}}, "context_unsupported"),
            ({"multitask_strategy": "interrupt"}, "multitask_strategy_unsupported"),
            ({"command": {"update": {"verified_user_id": "x"}}}, "command_unsupported"),
            ({"command": {"goto": "write_tools"}}, "command_unsupported"),
            ({"interrupt_before": ["write_tools"]}, "breakpoints_unsupported"),
        ],
    )
    async def test_what_cannot_be_honoured_is_refused_by_name(
        self, noah: LangGraphClient, options: dict[str, Any], code: str
    ) -> None:
        thread_id = (await noah.threads.create())["thread_id"]
        with pytest.raises(UnprocessableEntityError) as refused:
            await noah.runs.create(
                thread_id, "agent", input={"messages": [{"content": "hi"}]}, **options
            )
        assert refused.value.body["error"]["code"] == code  # type: ignore[index]

    async def test_state_updates_and_stateless_runs_are_refused(
        self, noah: LangGraphClient
    ) -> None:
        thread_id = (await noah.threads.create())["thread_id"]
        with pytest.raises(APIStatusError) as refused:  # 405: the method is not the state's
            await noah.threads.update_state(thread_id, {"messages": []})
        assert refused.value.status_code == 405
        assert refused.value.body["error"]["code"] == "state_update_unsupported"  # type: ignore[index]
        with pytest.raises(UnprocessableEntityError):
            await noah.runs.create(None, "agent", input={"messages": [{"content": "hi"}]})


class TestDiscovery:
    async def test_info_assistant_and_both_ways_of_sending_the_token(
        self, server: LiveServer, noah: LangGraphClient
    ) -> None:
        async with httpx.AsyncClient(base_url=f"{server.url}/lg") as http:
            assert (await http.get("/info")).status_code == 200  # public, as on the Platform
            bearer = {"Authorization": f"Bearer {server.token(NOAH)}"}
            assert (await http.post("/threads/search", json={}, headers=bearer)).status_code == 200
            assert (await http.post("/threads/search", json={})).status_code == 401
        (assistant,) = await noah.assistants.search(graph_id="agent")
        assert (await noah.assistants.get(assistant["assistant_id"])) == assistant
        assert (await noah.assistants.get("agent"))["assistant_id"] == assistant["assistant_id"]
        with pytest.raises(NotFoundError):
            await noah.assistants.get("00000000-0000-0000-0000-000000000000")


class TestFailureAndRegenerate:
    async def test_a_failed_run_ends_with_error_and_the_thread_says_so(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(lambda request: Reply.fail(500))
        thread_id = (await noah.threads.create())["thread_id"]
        events = await parts(
            noah.runs.stream(
                thread_id, "agent", input={"messages": [{"type": "human", "content": "hi"}]}
            )
        )
        assert events[0][0] == "metadata"
        assert events[-1][0] == "error"
        assert events[-1][1]["error"] == "model_unavailable"
        run_id = events[0][1]["run_id"]
        assert (await noah.runs.get(thread_id, run_id))["status"] == "error"
        assert (await noah.threads.get(thread_id))["status"] == "error"

    async def test_regenerate_asks_the_last_question_again_from_before_it(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("First answer."), Reply.say("Second answer.")]))
        thread_id = (await noah.threads.create())["thread_id"]
        first = await noah.runs.wait(
            thread_id, "agent", input={"messages": [{"type": "human", "content": "hello"}]}
        )
        answer_id = first["messages"][-1]["id"]
        history = await noah.threads.get_history(thread_id, limit=50)
        first_seen = [
            s for s in history if answer_id in [m["id"] for m in s["values"].get("messages", [])]
        ][-1]
        # what Agent Chat UI sends for "regenerate": no input, the answer's parent checkpoint
        again = await noah.runs.wait(thread_id, "agent", checkpoint=first_seen["parent_checkpoint"])
        assert texts(again["messages"]) == [("human", "hello"), ("ai", "Second answer.")]


class TestDisconnect:
    async def test_on_disconnect_cancel_stops_the_run_when_the_client_leaves(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say(LONG)]), latency=Latency(tokens_per_s=20))
        thread_id = (await noah.threads.create())["thread_id"]
        stream = noah.runs.stream(
            thread_id,
            "agent",
            input={"messages": [{"type": "human", "content": "talk"}]},
            stream_mode="messages-tuple",
            on_disconnect="cancel",
        )
        run_id = ""
        async for part in stream:
            run_id = run_id or part.data["run_id"]
            if part.event == "messages":
                break
        await stream.aclose()  # type: ignore[attr-defined]
        for _ in range(100):
            if (await noah.runs.get(thread_id, run_id))["status"] != "running":
                break
            await asyncio.sleep(0.1)
        assert (await noah.runs.get(thread_id, run_id))["status"] == "interrupted"


class TestJoinOnAnotherProcess:
    async def test_a_join_answered_by_another_process_keeps_the_modes_and_the_opening_message(
        self,
        server: LiveServer,
        noah: LangGraphClient,
        model_server: ScriptedModelServer,
    ) -> None:
        """The run's options live with the run, not in the memory of the worker that
        started it: another worker (here another process on the same database) joins with
        the modes the client asked for and the message that opened the run."""
        model_server.use(Script([Reply.say(LONG)]), latency=Latency(tokens_per_s=200))
        thread_id = (await noah.threads.create())["thread_id"]
        run = await noah.runs.create(
            thread_id,
            "agent",
            input={"messages": [{"type": "human", "content": "talk to me"}]},
            stream_mode=["values"],
            stream_resumable=True,
        )
        with live_server(server.settings, model_server) as other:
            elsewhere = sdk(other)
            try:
                joined = await parts(
                    elsewhere.runs.join_stream(thread_id, run["run_id"], last_event_id="-1")
                )
            finally:
                await elsewhere.aclose()
        names = {e[0] for e in joined}
        assert names == {"metadata", "values"}, names  # not the default modes
        values = [e[1] for e in joined if e[0] == "values"]
        assert values[0]["messages"][-1]["content"] == "talk to me"
        assert values[-1]["messages"][-1]["content"] == LONG
        assert all(e[2] is not None for e in joined)  # resumable: every event has an id
