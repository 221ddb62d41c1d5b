"""`cs-agent eval compare` over two eval output folders as `cs-agent eval` writes them
(results.json and transcripts/), through the command line: the files it writes, and its
exit status for a CI job to gate on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import main as cli_main
from app.eval import report
from app.eval.conversation import TrialMetrics
from app.eval.runner import TaskResult, TrialResult
from app.eval.tasks import Task

CANCEL = [
    {"agent": "hi"},
    {"tool": "get_order_details", "args": {"order_id": "#W1"}, "result": "{}"},
    {
        "tool": "cancel_pending_order",
        "args": {"order_id": "#W1", "reason": "no longer needed"},
        "result": "{}",
    },
]
WRONG = [
    CANCEL[0],
    CANCEL[1],
    {
        "tool": "cancel_pending_order",
        "args": {"order_id": "#W1", "reason": "ordered by mistake"},
        "result": "{}",
    },
]


def write_run(folder: Path, rewards: dict[str, float], transcripts: dict[str, list[Any]]) -> None:
    """An eval's output, written by the eval's own report writer."""
    results = []
    for task_id, reward in rewards.items():
        metrics = TrialMetrics(seconds=3.0, input_tokens=1000, output_tokens=100, ended="stop")
        trial = TrialResult(
            task_id,
            1,
            reward,
            [] if reward else ["data: orders[#W1]: ..."],
            metrics,
            0,
            transcripts.get(task_id, []),
        )
        task = Task(task_id, "u1", f"instruction {task_id}", (), ())
        results.append(TaskResult(task, trials=[trial]))
    run = report.EvalRun(
        tasks_file="tasks.json",
        data="seed",
        agent_model="m",
        agent_price=(1.0, 2.0),
        customer_model="scripted",
        customer_price=(0.0, 0.0),
        mode="customer",
        confirmation="required",
        trials=1,
        concurrency=1,
        started_at="now",
        seconds=9.0,
        results=results,
    )
    report.write(run, folder)


def compare(*argv: str) -> int:
    try:
        cli_main(["eval", "compare", *argv])
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


class TestCompareCommand:
    def test_fail_on_regression_exits_1_on_a_regression_and_0_on_improvements_only(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        good, bad = tmp_path / "good", tmp_path / "bad"
        write_run(good, {"cancel": 1.0, "ask": 0.0}, {"cancel": CANCEL})
        write_run(bad, {"cancel": 0.0, "ask": 0.0}, {"cancel": WRONG})
        better = tmp_path / "better"
        write_run(better, {"cancel": 1.0, "ask": 1.0}, {"cancel": CANCEL})

        assert compare(str(good), str(bad), "--fail-on-regression") == 1
        assert "1 regression(s): cancel" in capsys.readouterr().out
        assert compare(str(good), str(bad)) == 0  # without the flag it only reports
        assert compare(str(good), str(better), "--fail-on-regression") == 0
        assert compare(str(tmp_path / "missing"), str(bad)) == 2  # a typed error, one line
        assert "no results.json" in capsys.readouterr().err

        written = json.loads((bad / "compare.json").read_text())
        [cancel] = [t for t in written["tasks"] if t["id"] == "cancel"]
        assert cancel["actions"]["changed"] == [
            {
                "name": "cancel_pending_order",
                "baseline": {"order_id": "#W1", "reason": "no longer needed"},
                "candidate": {"order_id": "#W1", "reason": "ordered by mistake"},
                "differs": {"reason": ["no longer needed", "ordered by mistake"]},
            }
        ]
        assert written["pass_hat_k"]["1"] == {"baseline": 0.5, "candidate": 0.0, "delta": -0.5}
        md = (bad / "compare.md").read_text()
        assert (
            "- different arguments: `cancel_pending_order` reason: 'no longer needed' -> "
            "'ordered by mistake'" in md
        )
        assert (better / "compare.md").exists()
