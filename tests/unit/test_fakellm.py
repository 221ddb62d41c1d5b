"""The scripted model's wire format, request reading and scripts, without a server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.demo import chat
from tests.fakellm import (
    ChatRequest,
    OrderLookupPolicy,
    Reply,
    Router,
    Script,
    ScriptExhausted,
    StreamFault,
    ToolCall,
    wire,
)
from tests.fakellm.__main__ import load_policy
from tests.fakellm.policies import answer_order_status
from tests.fakes import scenarios


def request(*messages: dict[str, Any], stream: bool = True, usage: bool = True) -> ChatRequest:
    body: dict[str, Any] = {"model": "m", "messages": list(messages), "stream": stream}
    if usage:
        body["stream_options"] = {"include_usage": True}
    return ChatRequest.from_body(body)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant_calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


class TestSplitting:
    @given(st.text())
    def test_words_join_back_to_the_text(self, text: str) -> None:
        assert "".join(chat.split_words(text)) == text

    def test_text_is_split_word_by_word_with_leading_spaces(self) -> None:
        assert chat.split_words("Your order is pending.") == ["Your", " order", " is", " pending."]

    @given(st.text(min_size=1))
    def test_fixed_pieces_join_back(self, text: str) -> None:
        pieces = wire.split_fixed(text, 3)
        assert "".join(pieces) == text
        assert all(1 <= len(p) <= 3 for p in pieces)


class TestChunks:
    def test_stream_is_role_words_call_pieces_finish_then_usage(self) -> None:
        reply = Reply.calls(ToolCall("get_order_details", {"order_id": "#W1"}), text="On it")
        chunks = list(wire.chunks(request(user("hi")), reply, wire.Usage(10, 3)))

        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        assert deltas[0]["role"] == "assistant"
        assert [d["content"] for d in deltas[1:3]] == ["On", " it"]
        call_deltas = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
        assert call_deltas[0]["function"]["name"] == "get_order_details"
        assert call_deltas[0]["id"].startswith("call_")
        pieces = [d["function"]["arguments"] for d in call_deltas[1:]]
        assert len(pieces) > 1
        assert json.loads("".join(pieces)) == {"order_id": "#W1"}
        assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "total_tokens": 13,
        }

    def test_no_usage_chunk_unless_asked(self) -> None:
        chunks = list(
            wire.chunks(request(user("hi"), usage=False), Reply.say("x"), wire.Usage(1, 1))
        )
        assert all(c["choices"] for c in chunks)
        assert "usage" not in chunks[0]

    def test_parallel_calls_get_their_own_index(self) -> None:
        reply = Reply.calls(ToolCall("a", {"x": 1}), ToolCall("b", {"y": 2}))
        chunks = wire.chunks(request(user("hi")), reply, wire.Usage(1, 1))
        indexes = {
            d["tool_calls"][0]["index"]
            for c in chunks
            if c["choices"] and "tool_calls" in (d := c["choices"][0]["delta"])
        }
        assert indexes == {0, 1}

    def test_completion_body_carries_message_calls_and_usage(self) -> None:
        reply = Reply.calls(ToolCall("a", "{not json"))
        body = wire.completion(request(user("hi"), stream=False), reply, wire.Usage(4, 2))
        message = body["choices"][0]["message"]
        assert message["content"] is None
        assert message["tool_calls"][0]["function"]["arguments"] == "{not json"
        assert body["choices"][0]["finish_reason"] == "tool_calls"
        assert body["usage"]["total_tokens"] == 6


def broken(fault: StreamFault, text: str = "one two three four") -> list[dict[str, Any]]:
    reply = Reply.broken(fault, text)
    chunks = wire.chunks(request(user("hi")), reply, wire.Usage(4, 4))
    return list(wire.broken_chunks(chunks, fault))


def finish_reasons(chunks: list[dict[str, Any]]) -> list[str]:
    return [
        c["finish_reason"] for k in chunks for c in k.get("choices") or [] if c["finish_reason"]
    ]


class TestStreamFaults:
    @pytest.mark.parametrize(
        "fault", [StreamFault.drip(), StreamFault.reset()], ids=["drip", "reset"]
    )
    def test_drip_and_reset_send_the_role_and_first_word_by_default(
        self, fault: StreamFault
    ) -> None:
        chunks = broken(fault)
        assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "one"]

    def test_truncate_stops_before_the_finish_and_the_usage(self) -> None:
        chunks = broken(StreamFault.truncate())
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert text == "one two three four"
        assert finish_reasons(chunks) == []
        assert all(c["choices"] for c in chunks)  # no usage chunk

    def test_truncate_after_some_chunks_cuts_mid_answer(self) -> None:
        chunks = broken(StreamFault.truncate(after_chunks=3))
        assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "one", " two"]

    def test_wrong_schema_chunks_carry_no_choices_and_no_finish(self) -> None:
        chunks = broken(StreamFault.wrong_schema())
        assert chunks and all("choices" not in c for c in chunks)
        assert [c["delta"].get("content") for c in chunks[1:5]] == [
            "one",
            " two",
            " three",
            " four",
        ]

    def test_a_hang_streams_nothing(self) -> None:
        assert broken(StreamFault.hang()) == []

    def test_wrong_schema_plain_reply_is_no_chat_completion(self) -> None:
        body = wire.not_a_completion(request(user("hi"), stream=False), Reply.say("hello"))
        assert "choices" not in body and body["message"]["content"] == "hello"

    def test_drop_after_chunks_is_a_reset(self) -> None:
        reply = Reply.say("x", drop_after_chunks=3)
        assert reply.resolved_stream_fault == StreamFault.reset(after_chunks=3)
        assert Reply.say("x").resolved_stream_fault is None


class TestTokenEstimate:
    def test_prompt_tokens_grow_with_the_conversation_and_tools(self) -> None:
        short = request(user("hi"))
        longer = request(user("hi"), {"role": "assistant", "content": "x" * 400}, user("ok"))
        with_tools = ChatRequest.from_body(
            {**short.body, "tools": [{"type": "function", "function": {"name": "t" * 40}}]}
        )
        assert chat.prompt_tokens(short) < chat.prompt_tokens(longer)
        assert chat.prompt_tokens(short) < chat.prompt_tokens(with_tools)
        assert chat.prompt_tokens(longer) >= 100  # ~4 characters per token

    def test_estimate_is_deterministic(self) -> None:
        req = request(user("where is my order #W1234567"))
        assert chat.prompt_tokens(req) == chat.prompt_tokens(req)


class TestChatRequest:
    def test_reads_system_prompt_users_and_tools(self) -> None:
        req = ChatRequest.from_body(
            {
                "model": "m",
                "messages": [{"role": "system", "content": "be nice"}, user("a"), user("b")],
                "tools": [{"type": "function", "function": {"name": "calc_shipping"}}],
            }
        )
        assert req.system_prompt == "be nice"
        assert (req.first_user_text(), req.last_user_text()) == ("a", "b")
        assert req.tool_names == ["calc_shipping"]
        assert not req.stream

    def test_pending_tool_results_are_the_trailing_tool_messages_with_names(self) -> None:
        req = request(
            user("q"),
            assistant_calls(("c1", "get_order_details", {}), ("c2", "get_user_details", {})),
            tool("c1", '{"status": "pending"}'),
            tool("c2", "Error: user not found"),
        )
        results = req.pending_tool_results()
        assert [r.name for r in results] == ["get_order_details", "get_user_details"]
        assert results[0].json() == {"status": "pending"}
        assert results[1].is_error
        assert results[1].json() is None

    def test_no_pending_results_after_a_user_message(self) -> None:
        req = request(assistant_calls(("c1", "x", {})), tool("c1", "{}"), user("and now?"))
        assert req.pending_tool_results() == []

    def test_list_content_parts_are_read_as_text(self) -> None:
        req = request({"role": "user", "content": [{"type": "text", "text": "hi"}]})
        assert req.last_user_text() == "hi"

    @pytest.mark.parametrize("body", [{"messages": "x"}, {"messages": [1]}, {}])
    def test_rejects_bodies_without_a_message_list(self, body: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            ChatRequest.from_body(body)


class TestScript:
    def test_steps_are_consumed_in_order_and_callables_see_the_request(self) -> None:
        script = Script([Reply.say("one"), lambda r: Reply.say(r.last_user_text().upper())])
        assert script(request(user("a"))).text == "one"
        assert script(request(user("b"))).text == "B"
        assert script.done

    def test_running_out_raises(self) -> None:
        script = Script([Reply.say("one")])
        script(request(user("a")))
        with pytest.raises(ScriptExhausted):
            script(request(user("a")))

    def test_then_answers_after_the_steps(self) -> None:
        script = Script([], then=lambda r: Reply.say("again"))
        assert script(request(user("a"))).text == "again"


class TestRouter:
    def test_each_conversation_follows_its_own_script(self) -> None:
        router = Router(scenarios.scenario_for)
        first_a = router(request(user("where is my order #W0000001")))
        first_b = router(request(user("where is my order #W0000002")))
        assert first_a.tool_calls[0].arguments == {"order_id": "#W0000001"}
        assert first_b.tool_calls[0].arguments == {"order_id": "#W0000002"}
        followup_a = request(
            user("where is my order #W0000001"),
            assistant_calls(("c1", "get_order_details", {"order_id": "#W0000001"})),
            tool("c1", '{"order_id": "#W0000001", "status": "delivered"}'),
        )
        assert "delivered" in router(followup_a).text
        assert len(router.conversations) == 2

    def test_by_marker_picks_the_scenario_named_in_the_first_message(self) -> None:
        router = Router.by_marker(
            {"[greet]": lambda r: scenarios.greeting("hey"), "[ship]": lambda r: Script([])},
            default=lambda r: scenarios.greeting("default"),
        )
        assert router(request(user("[greet] hello"))).text == "hey"
        assert router(request(user("something else"))).text == "default"

    def test_by_marker_without_default_refuses_unknown_conversations(self) -> None:
        router = Router.by_marker({"[greet]": lambda r: scenarios.greeting()})
        with pytest.raises(LookupError):
            router(request(user("hello")))


class TestOrderLookupPolicy:
    policy = OrderLookupPolicy()

    def test_looks_up_an_order_id_from_the_question(self) -> None:
        reply = self.policy(request(user("where is my order W1234567?")))
        assert reply.tool_calls == (ToolCall("get_order_details", {"order_id": "#W1234567"}),)

    def test_answers_with_the_status_from_the_tool_result(self) -> None:
        reply = self.policy(
            request(
                user("where is my order #W5918442"),
                assistant_calls(("c1", "get_order_details", {"order_id": "#W5918442"})),
                tool("c1", '{"order_id": "#W5918442", "status": "pending", "items": []}'),
            )
        )
        assert "#W5918442 is currently pending" in reply.text

    def test_reports_a_failed_lookup(self) -> None:
        reply = self.policy(
            request(
                user("#W0000000"),
                assistant_calls(("c1", "get_order_details", {})),
                tool("c1", "Error: order not found"),
            )
        )
        assert "order not found" in reply.text

    def test_greets_and_otherwise_asks_for_the_order_number(self) -> None:
        assert "order number" in self.policy(request(user("Hello there"))).text
        assert "#W" in self.policy(request(user("my parcel is late"))).text


class TestLoadPolicy:
    def test_loads_a_class_a_factory_or_a_policy(self) -> None:
        assert isinstance(
            load_policy("tests.fakellm.policies:OrderLookupPolicy"), OrderLookupPolicy
        )
        assert isinstance(load_policy("tests.fakes.scenarios:customers"), Router)
        policy = load_policy("tests.fakellm.policies:answer_order_status")
        assert policy is answer_order_status

    def test_refuses_a_spec_without_attribute(self) -> None:
        with pytest.raises(SystemExit):
            load_policy("tests.fakellm.policies")
