"""Comparing two eval runs: which tool calls differ, and what counts as a regression."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.eval.compare import Run, compare, diff_actions, markdown, summary


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def results(rewards: dict[str, list[float]], cost: float = 0.01) -> dict[str, Any]:
    tasks = [
        {
            "id": task_id,
            "unsolvable_by_policy": None,
            "trials": [
                {
                    "trial": n,
                    "reward": r,
                    "reasons": [] if r else ["data: x"],
                    "cost_usd": cost,
                    "seconds": 2.0,
                }
                for n, r in enumerate(trials, start=1)
            ],
        }
        for task_id, trials in rewards.items()
    ]
    scored = [sum(t) / len(t) for t in rewards.values()]
    return {
        "agent_model": "m",
        "trials": 1,
        "started_at": "now",
        "pass_hat_k": {"1": sum(scored) / len(scored)},
        "tasks": tasks,
    }


def run(rewards: dict[str, list[float]], cost: float = 0.01) -> Run:
    return Run(Path("/nonexistent"), results(rewards, cost))


class TestActions:
    def test_calls_are_matched_whatever_their_order_then_paired_by_tool(self) -> None:
        baseline = [
            call("get_order_details", order_id="#W1"),
            call("get_order_details", order_id="#W2"),
            call("cancel_pending_order", order_id="#W1", reason="no longer needed"),
            call("transfer_to_human_agents", summary="s"),
        ]
        candidate = [
            call("get_order_details", order_id="#W2"),
            call("get_order_details", order_id="#W1"),
            call("modify_pending_order_payment", order_id="#W1", payment_method_id="card"),
            call("cancel_pending_order", order_id="#W1", reason="ordered by mistake"),
        ]
        got = diff_actions(baseline, candidate)
        assert got.added == [
            call("modify_pending_order_payment", order_id="#W1", payment_method_id="card")
        ]
        assert got.missing == [call("transfer_to_human_agents", summary="s")]
        assert [c["differs"] for c in got.changed] == [
            {"reason": ["no longer needed", "ordered by mistake"]}
        ]
        assert diff_actions(baseline, list(reversed(baseline))).empty()


class TestStatus:
    def test_a_task_passed_before_and_failed_after_is_a_regression(self) -> None:
        got = compare(
            run({"a": [1.0, 1.0], "b": [0.0], "c": [1.0, 0.0], "d": [1.0]}),
            run({"a": [1.0, 0.0], "b": [1.0], "c": [0.0, 0.0], "e": [1.0]}, cost=0.02),
        )
        status = {t["id"]: t["status"] for t in got["tasks"]}
        assert status == {
            "a": "regressed",
            "b": "improved",
            "c": "worse",
            "d": "dropped",
            "e": "new",
        }
        assert (got["regressions"], got["improvements"]) == (["a"], ["b"])
        assert got["pass_hat_k"]["1"]["delta"] is not None
        assert got["totals"]["cost_usd"]["delta"] > 0
        [a] = [t for t in got["tasks"] if t["id"] == "a"]
        assert a["trials_compared"] == [1, 2]  # the candidate's failing trial
        assert a["candidate"]["reasons"] == ["data: x"]

    def test_the_report_and_summary_say_what_changed(self) -> None:
        got = compare(run({"a": [1.0]}), run({"a": [0.0]}))
        text = markdown(got)
        assert "| a | regressed | 1 | 0 |" in text and "Why the candidate scored 0" in text
        assert "1 regression(s): a; 0 improvement(s)" in summary(got)
