"""The text ReAct protocol: what a reply means, and what of it the customer sees."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from app.agent.react_protocol import (
    FORMAT_REMINDER,
    ActionStep,
    FinalAnswer,
    Parsed,
    Unparseable,
    final_answer_stream_filter,
    final_answer_text,
    format_error_observation,
    observation_text,
    parse_reply,
    render_tools_prompt,
    tool_arg_names,
)
from app.tools.registry import build_tools
from app.tools.scope import Runtime
from app.tools.spec import ToolDeps, read_tool

TOOLS: list[BaseTool] = build_tools(cast(Any, None)).all  # the pool is only used when called
NAMES = [t.name for t in TOOLS]
ARGS = tool_arg_names(TOOLS)


def parse(text: str) -> Parsed:
    return parse_reply(text, NAMES, ARGS)


def action(text: str) -> ActionStep:
    parsed = parse(text)
    assert isinstance(parsed, ActionStep), parsed
    return parsed


class TestStrictAction:
    def test_well_formed_action_is_strict(self) -> None:
        step = action(
            'Thought: I need the order.\nAction: get_order_details\nAction Input: {"order_id": '
            '"#W5918442"}'
        )
        assert step == ActionStep(
            thought="I need the order.",
            tool="get_order_details",
            args={"order_id": "#W5918442"},
            level="strict",
        )

    def test_made_up_observation_and_answer_after_the_input_are_ignored(self) -> None:
        step = action(
            "Action: get_user_details\n"
            'Action Input: {"user_id": "noah_brown_6181"}\n'
            "Observation: Noah Brown\nThought: done\nFinal Answer: Hi Noah"
        )
        assert (step.tool, step.args, step.level) == (
            "get_user_details",
            {"user_id": "noah_brown_6181"},
            "strict",
        )

    def test_multi_line_json_is_strict(self) -> None:
        step = action(
            "Action: modify_pending_order_payment\nAction Input: {\n"
            '  "order_id": "#W1",\n  "payment_method_id": "gift_card_1"\n}\n'
        )
        assert step.args == {"order_id": "#W1", "payment_method_id": "gift_card_1"}
        assert step.level == "strict"


class TestLenientAction:
    @pytest.mark.parametrize(
        "text",
        [
            'action : get_order_details\nAction Input: {"order_id": "#W1"}',
            'Action: get_order_details\nACTION INPUT: {"order_id": "#W1"}',
            'Action: get_order_details\nAction input - {"order_id": "#W1"}',
            '**Action:** get_order_details\n**Action Input:** {"order_id": "#W1"}',
        ],
    )
    def test_label_case_and_spacing_variants(self, text: str) -> None:
        step = action(text)
        assert (step.tool, step.args, step.level) == (
            "get_order_details",
            {"order_id": "#W1"},
            "lenient",
        )

    @pytest.mark.parametrize("fence", ["```json", "```"])
    def test_arguments_in_a_code_fence(self, fence: str) -> None:
        step = action(
            f'Action: get_order_details\nAction Input:\n{fence}\n{{"order_id": "#W1"}}\n```\n'
        )
        assert (step.args, step.level) == ({"order_id": "#W1"}, "lenient")

    @pytest.mark.parametrize("comment", ["// the customer's order", "# the customer's order"])
    def test_trailing_comment_after_the_json(self, comment: str) -> None:
        step = action(f'Action: get_order_details\nAction Input: {{"order_id": "#W1"}} {comment}')
        assert (step.args, step.level) == ({"order_id": "#W1"}, "lenient")

    def test_single_quotes(self) -> None:
        step = action("Action: get_order_details\nAction Input: {'order_id': '#W1'}")
        assert (step.args, step.level) == ({"order_id": "#W1"}, "lenient")

    def test_trailing_comma(self) -> None:
        step = action('Action: get_order_details\nAction Input: {"order_id": "#W1",}')
        assert (step.args, step.level) == ({"order_id": "#W1"}, "lenient")

    @pytest.mark.parametrize(
        "written", ["#W5918442", '"#W5918442"', "'#W5918442'", "order_id: #W5918442"]
    )
    def test_bare_string_for_a_one_argument_tool(self, written: str) -> None:
        step = action(f"Action: get_order_details\nAction Input: {written}")
        assert (step.args, step.level) == ({"order_id": "#W5918442"}, "lenient")

    def test_bare_string_keeps_digits_as_text(self) -> None:
        step = action("Action: get_product_details\nAction Input: 6086499569")
        assert step.args == {"product_id": "6086499569"}

    @pytest.mark.parametrize(
        "written", ["Get_Order_Details", "GET ORDER DETAILS", "`get_order_details`"]
    )
    def test_tool_name_case_insensitive(self, written: str) -> None:
        step = action(f'Action: {written}\nAction Input: {{"order_id": "#W1"}}')
        assert (step.tool, step.level) == ("get_order_details", "lenient")

    @pytest.mark.parametrize(
        ("written", "tool"),
        [
            ("get_order_detail", "get_order_details"),
            ("find_user_by_email", "find_user_id_by_email"),
            ("calculator", "calculate"),
        ],
    )
    def test_tool_name_by_close_spelling(self, written: str, tool: str) -> None:
        step = action(f'Action: {written}\nAction Input: {{"x": "1"}}')
        assert (step.tool, step.level) == (tool, "lenient")

    def test_function_call_style_on_the_action_line(self) -> None:
        step = action('Action: get_order_details({"order_id": "#W1"})')
        assert (step.tool, step.args, step.level) == (
            "get_order_details",
            {"order_id": "#W1"},
            "lenient",
        )

    def test_tool_without_arguments_needs_no_input(self) -> None:
        assert action("Action: list_all_product_types").args == {}
        assert action("Action: list_all_product_types\nAction Input: none").args == {}
        strict = action("Action: list_all_product_types\nAction Input: {}")
        assert (strict.args, strict.level) == ({}, "strict")


class TestUnparseable:
    def test_unknown_tool(self) -> None:
        parsed = parse('Action: refund_everything\nAction Input: {"order_id": "#W1"}')
        assert isinstance(parsed, Unparseable)
        assert "refund_everything" in parsed.reason
        assert "get_order_details" in parsed.reason  # the model is told what exists

    @pytest.mark.parametrize("written", ["modify_order_address", "modify_pending_order"])
    def test_a_name_close_to_two_tools_is_not_guessed(self, written: str) -> None:
        parsed = parse(f'Action: {written}\nAction Input: {{"order_id": "#W1"}}')
        assert isinstance(parsed, Unparseable)

    @pytest.mark.parametrize("written", ['{"order_id": ', "[1, 2]", "{order_id: #W1}", "the usual"])
    def test_input_that_is_no_object(self, written: str) -> None:
        parsed = parse(f"Action: modify_pending_order_payment\nAction Input: {written}")
        assert isinstance(parsed, Unparseable)
        assert "modify_pending_order_payment" in parsed.reason

    def test_missing_action_input(self) -> None:
        parsed = parse("Thought: look it up\nAction: get_order_details\nObservation: ...")
        assert isinstance(parsed, Unparseable)
        assert "Action Input" in parsed.reason

    def test_action_input_without_action(self) -> None:
        assert isinstance(parse('Action Input: {"order_id": "#W1"}'), Unparseable)

    @pytest.mark.parametrize("text", ["", "  \n", "Final Answer:", "Thought: x\nFinal Answer:  \n"])
    def test_empty_reply_or_answer(self, text: str) -> None:
        assert isinstance(parse(text), Unparseable)

    def test_empty_action_line(self) -> None:
        parsed = parse('Action:\nAction Input: {"order_id": "#W1"}')
        assert isinstance(parsed, Unparseable)

    def test_long_unknown_names_are_clipped_in_the_reason(self) -> None:
        parsed = parse("Action: " + "x" * 500 + "\nAction Input: {}")
        assert isinstance(parsed, Unparseable)
        assert "x" * 65 not in parsed.reason


class TestFinalAnswer:
    def test_final_answer_text_and_thought(self) -> None:
        parsed = parse(
            "Thought: I know this.\nFinal Answer: Your order is pending.\nAnything else?"
        )
        assert parsed == FinalAnswer(
            text="Your order is pending.\nAnything else?", thought="I know this."
        )

    @pytest.mark.parametrize(
        "label", ["final answer:", "FINAL ANSWER :", "Final Answer -", "**Final Answer:**"]
    )
    def test_label_variants(self, label: str) -> None:
        assert parse(f"{label} Hello") == FinalAnswer(text="Hello", thought="")

    def test_no_markers_is_the_final_answer(self) -> None:
        assert parse("  Hello! How can I help?\n") == FinalAnswer(
            text="Hello! How can I help?", thought=""
        )

    def test_no_markers_drops_a_leading_thought_line(self) -> None:
        assert parse("Thought: greet them\nHello!\nHow can I help?") == FinalAnswer(
            text="Hello!\nHow can I help?", thought="greet them"
        )

    def test_a_lone_thought_is_said_rather_than_nothing(self) -> None:
        assert parse("Thought: Your order has shipped.") == FinalAnswer(
            text="Your order has shipped.", thought="Your order has shipped."
        )

    def test_action_before_final_answer_wins(self) -> None:
        step = action(
            'Action: get_order_details\nAction Input: {"order_id": "#W1"}\nFinal Answer: done'
        )
        assert step.tool == "get_order_details"

    def test_final_answer_before_action_wins(self) -> None:
        parsed = parse("Final Answer: I will check.\nAction: get_order_details\nAction Input: {}")
        assert parsed == FinalAnswer(
            text="I will check.\nAction: get_order_details\nAction Input: {}", thought=""
        )

    def test_words_that_only_start_like_labels_are_text(self) -> None:
        text = "Actions speak louder than words.\nFinal answers take time."
        assert parse(text) == FinalAnswer(text=text, thought="")


class TestObservationTexts:
    def test_format_error_observation_names_the_reason_and_the_format(self) -> None:
        text = format_error_observation("unknown tool 'x'")
        assert text.startswith("Observation: Error:")
        assert "unknown tool 'x'" in text
        assert text.endswith(FORMAT_REMINDER)
        assert "Action Input:" in FORMAT_REMINDER and "Final Answer:" in FORMAT_REMINDER

    def test_observation_text(self) -> None:
        assert observation_text("calculate", "4.0\n") == "Observation: [calculate] 4.0"
        multi = observation_text("get_order_details", "Order #W1: pending\nstatus: pending")
        assert multi == "Observation: [get_order_details]\nOrder #W1: pending\nstatus: pending"


REPLIES = [
    "Thought: I know it.\nFinal Answer: Hello there!\nBye.  \n",
    "Final Answer:Hi",
    "**Final Answer:** *bold* start",
    "final answer -\n\n  Two\n\nparagraphs ",
    'Thought: look\nAction: get_order_details\nAction Input: {"order_id": "#W1"}\n'
    "Observation: x\nFinal Answer: made up",
    "Action-Input: {}\nFinal Answer: no",
    "Thought: greet\nHello! How can I help?",
    "Just text, no labels at all.",
    "Thought: only a thought",
    "Final Answer: I'll check.\nAction: get_order_details",
    "Final Answer: \n",
    "",
    "Action - inputs welcome\nFinal Answer: ok",  # looks like an Action line until 'inputs'
]


def filtered(pieces: list[str]) -> str:
    stream = final_answer_stream_filter()
    out = "".join(stream.feed(p) for p in pieces)
    return out + stream.flush()


def expected(text: str) -> str:
    parsed = parse(text)
    return parsed.text if isinstance(parsed, FinalAnswer) else ""


class TestStreamFilter:
    def test_expected_agrees_with_final_answer_text(self) -> None:
        for text in REPLIES:
            assert final_answer_text(text) == expected(text)

    def test_marker_split_across_deltas(self) -> None:
        stream = final_answer_stream_filter()
        assert stream.feed("Thought: ok\nFinal An") == ""
        assert stream.feed("swer: Hel") == "Hel"
        assert stream.feed("lo") == "lo"
        assert stream.flush() == ""

    def test_nothing_passes_while_the_model_writes_an_action(self) -> None:
        stream = final_answer_stream_filter()
        pieces = ["Thought: look\n", "Action: get_order_details\n", 'Action Input: {"a": 1}\n']
        assert [stream.feed(p) for p in pieces] == ["", "", ""]
        assert stream.feed("Final Answer: made up") == ""
        assert stream.flush() == ""

    def test_text_without_markers_comes_at_flush(self) -> None:
        stream = final_answer_stream_filter()
        assert stream.feed("Thought: greet\nHel") == ""
        assert stream.feed("lo!") == ""
        assert stream.flush() == "Hello!"

    @pytest.mark.parametrize("text", REPLIES)
    def test_every_split_into_two_or_three_deltas(self, text: str) -> None:
        want = expected(text)
        for i in range(len(text) + 1):
            assert filtered([text[:i], text[i:]]) == want, i
            for j in range(i, len(text) + 1):
                assert filtered([text[:i], text[i:j], text[j:]]) == want, (i, j)

    @pytest.mark.parametrize("text", REPLIES)
    def test_one_character_at_a_time(self, text: str) -> None:
        assert filtered(list(text)) == expected(text)

    @given(
        st.lists(
            st.sampled_from(
                ["Thought: x\n", "Final Answer:", " ", "\n", "Hi", "**", "Action: calc\n", "ok"]
            ),
            max_size=12,
        ),
        st.lists(st.integers(0, 200), max_size=6),
    )
    def test_any_reply_any_chunking(self, parts: list[str], cuts: list[int]) -> None:
        text = "".join(parts)
        bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
        pieces = [text[a:b] for a, b in pairwise(bounds)]
        assert filtered(pieces) == final_answer_text(text)


class TestRenderToolsPrompt:
    def test_every_tool_with_its_purpose_and_schema(self) -> None:
        prompt = render_tools_prompt(TOOLS)
        for tool in TOOLS:
            assert f"- {tool.name}: {(tool.description or '').splitlines()[0]}" in prompt
            schema = tool.tool_call_schema
            assert isinstance(schema, type) and issubclass(schema, BaseModel)
            properties = schema.model_json_schema().get("properties", {})
            for name, spec in properties.items():
                shown = {k: v for k, v in spec.items() if k != "title"}
                assert json.dumps({name: shown}, separators=(",", ":"))[1:-1] in prompt

    def test_injected_runtime_is_left_out(self) -> None:
        @read_tool(label="Looking up {order} …")
        async def lookup(deps: ToolDeps, order_id: str, runtime: Runtime) -> str:
            """Look an order up."""
            return order_id

        prompt = render_tools_prompt([lookup.tool(cast(Any, None))])
        assert "runtime" not in prompt
        assert '"order_id"' in prompt
        assert "runtime" not in render_tools_prompt(TOOLS)

    def test_format_and_one_worked_example(self) -> None:
        prompt = render_tools_prompt(TOOLS)
        for label in ("Thought:", "Action:", "Action Input:", "Observation:", "Final Answer:"):
            assert label in prompt
        assert prompt.count("Example:") == 1
        example = prompt.split("Example:\n", 1)[1]
        step = parse(example)
        assert isinstance(step, ActionStep) and step.level == "strict"

    def test_tools_without_arguments_say_so(self) -> None:
        prompt = render_tools_prompt(TOOLS)
        assert "- list_all_product_types: " in prompt
        assert "arguments: none (use {})" in prompt

    def test_arg_names_leave_runtime_out(self) -> None:
        assert ARGS["get_order_details"] == ["order_id"]
        assert ARGS["list_all_product_types"] == []
        assert all("runtime" not in names for names in ARGS.values())
