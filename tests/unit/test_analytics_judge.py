"""The judge's answer is the rubric's JSON or nothing; the transcript it reads is cut to size."""

from __future__ import annotations

import json

import pytest

from app.analytics.judge import MESSAGE_LIMIT, POINTS, TRANSCRIPT_LIMIT, parse_answer, transcript_of
from app.analytics.judging import sampled


def answer(**points: object) -> str:
    body = {p: {"score": 4, "reason": f"{p} was fine."} for p in POINTS}
    body.update(points)  # type: ignore[arg-type]
    return json.dumps(body)


class TestParseAnswer:
    def test_the_points_come_back_in_rubric_order_with_their_reasons(self) -> None:
        got = parse_answer(answer(tone={"score": 2, "reason": "  Curt\n and   cold. "}))

        assert [p["point"] for p in got] == list(POINTS)
        assert got[-1] == {"point": "tone", "score": 2, "reason": "Curt and cold."}

    def test_a_json_code_fence_around_the_answer_is_allowed(self) -> None:
        assert parse_answer(f"```json\n{answer()}\n```")[0]["score"] == 4

    @pytest.mark.parametrize(
        "text",
        [
            "The conversation went well: 5/5.",
            answer(accuracy={"score": 6, "reason": "Too good."}),
            answer(accuracy={"score": 0, "reason": "Bad."}),
            answer(accuracy={"score": "4", "reason": "A string."}),
            answer(accuracy={"score": 3.5, "reason": "Half."}),
            answer(accuracy={"score": 3, "reason": ""}),
            json.dumps({"resolution": {"score": 4, "reason": "Only one point."}}),
            "[]",
        ],
    )
    def test_anything_else_is_refused(self, text: str) -> None:
        with pytest.raises(ValueError):
            parse_answer(text)


class TestTranscript:
    def test_each_part_of_a_run_is_labelled_by_who_said_it(self) -> None:
        runs = [
            {
                "messages": [
                    {"role": "user", "author": "customer", "content": "where is #W1?"},
                    {
                        "role": "assistant",
                        "author": "agent",
                        "content": "",
                        "tool_calls": [{"name": "get_order_details", "args": {"order_id": "#W1"}}],
                    },
                    {"role": "tool", "name": "get_order_details", "status": "error",
                     "content": "not found"},
                    {"role": "user", "author": "staff", "name": "Alice", "content": "Hello."},
                ]
            },
            None,  # a run that recorded nothing
        ]  # fmt: skip

        assert transcript_of(runs).splitlines() == [
            "[customer] where is #W1?",
            '[agent calls get_order_details] {"order_id": "#W1"}',
            "[tool get_order_details, error] not found",
            "[staff Alice] Hello.",
        ]

    def test_a_long_tool_result_and_a_long_conversation_are_cut(self) -> None:
        big = {"role": "tool", "name": "t", "status": "success", "content": "x" * 10_000}
        many = [{"messages": [big]} for _ in range(40)]
        text = transcript_of(many)

        assert max(len(line) for line in text.splitlines()) < MESSAGE_LIMIT + 40
        assert len(text) < TRANSCRIPT_LIMIT + 100
        assert "the middle of the conversation is left out" in text


def test_the_sample_grows_with_the_rate_and_keeps_its_members() -> None:
    ids = [f"u:{i}" for i in range(2000)]
    tenth = {i for i in ids if sampled(i, 0.1)}
    half = {i for i in ids if sampled(i, 0.5)}

    assert tenth <= half
    assert 150 < len(tenth) < 250 and 900 < len(half) < 1100
    assert not any(sampled(i, 0.0) for i in ids) and all(sampled(i, 1.0) for i in ids)
