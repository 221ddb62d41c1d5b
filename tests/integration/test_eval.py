"""`cs-agent eval` against the real service: real Postgres, real service processes over HTTP.

Only the two models are scripted, each a scripted OpenAI-compatible server: the agent's
(which the services are pointed at) replays a task's gold actions, and the customer's plays
the task from its `customer_lines` (the built-in scripted customer's rules, served over HTTP
as a model customer is). Confirmation is on: the customer says yes.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from app.cli import main as cli_main
from app.db.seed import generate
from app.eval import report
from app.eval.conversation import TrialMetrics
from app.eval.importer import import_checkout
from app.eval.runner import CustomerModel, RunOptions, TaskResult, TrialResult, run_tasks
from app.eval.scripted import ScriptedChat
from app.eval.simulator import OpenAIChat
from app.eval.snapshot import diff, read_snapshot
from app.eval.tasks import Action, Task, load_tasks, shipped_tasks_path
from app.eval.workers import Workbench
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.pg import admin_url

SHIPPED = load_tasks(shipped_tasks_path())
BY_ID = {t.id: t for t in SHIPPED}
Mutate = Callable[[Task, Action], dict[str, Any]]
_CODE = re.compile(r"\b(\d{6})\b")


class GoldAgent:
    """The agent's model: replays the task's gold actions one call at a time, answers with
    the task's outputs, and in a guest conversation confirms the emailed code first.
    Stateless: the task is found by the customer's first line."""

    def __init__(self, *, mutate: Mutate | None = None, omit_outputs: bool = False) -> None:
        self.mutate = mutate
        self.omit_outputs = omit_outputs

    def __call__(self, request: ChatRequest) -> Reply:
        task = next((t for t in SHIPPED if t.customer_lines[0] == request.first_user_text()), None)
        if task is None or not request.tools:
            return Reply.say("Thank you.")
        names = {
            str(c.get("id")): str(c.get("function", {}).get("name"))
            for m in request.messages
            for c in m.get("tool_calls") or []
        }
        results = [
            (names.get(str(m.get("tool_call_id")), ""), str(m.get("content") or ""))
            for m in request.messages
            if m.get("role") == "tool"
        ]
        last = request.messages[-1]
        if last.get("role") == "tool" and "Verification started" in results[-1][1]:
            return Reply.say("I have emailed you a 6-digit code. Please type it here.")
        code = _CODE.search(request.last_user_text()) if last.get("role") == "user" else None
        verifying = any("Verification started" in content for _, content in results)
        confirmed = any(name == "confirm_identity" for name, _ in results)
        if code and verifying and not confirmed:
            return Reply.call("confirm_identity", code=code.group(1))
        done = [name for name, _ in results if name != "confirm_identity"]
        if len(done) < len(task.actions):
            action = task.actions[len(done)]
            kwargs = self.mutate(task, action) if self.mutate else action.kwargs
            return Reply.call(action.name, **kwargs)
        if last.get("role") == "tool":
            outputs = "" if self.omit_outputs else " " + ", ".join(task.outputs)
            return Reply.say(f"All done.{outputs}")
        return Reply.say("Glad I could help. Is there anything else?")


def scripted_customer_policy(request: ChatRequest) -> Reply:
    return Reply.say(ScriptedChat(SHIPPED).reply(request.messages))


@pytest.fixture(scope="module")
def agent_model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(GoldAgent()) as server:
        yield server


@pytest.fixture(scope="module")
async def customer() -> AsyncIterator[CustomerModel]:
    with ScriptedModelServer(scripted_customer_policy) as server:
        async with AsyncOpenAI(base_url=server.base_url, api_key="test") as client:
            yield CustomerModel(OpenAIChat(client, "scripted-customer"), "scripted-customer")


@pytest.fixture(scope="module")
async def bench(
    agent_model: ScriptedModelServer, tmp_path_factory: Any
) -> AsyncIterator[Workbench]:
    env = {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": agent_model.base_url,
        "OPENAI_API_KEY": "test",
        "LLM_MODEL": "gpt-4o-mini",
        "LLM_MAX_RETRIES": "0",
        "WRITE_CONFIRMATION": "required",
    }
    async with Workbench(
        server_url=admin_url(),
        data=generate(),
        size=2,
        log_dir=tmp_path_factory.mktemp("eval-logs"),
        service_env=env,
        progress=lambda _: None,
    ) as workbench:
        yield workbench


async def run(
    bench: Workbench,
    agent_model: ScriptedModelServer,
    customer: CustomerModel,
    ids: list[str],
    agent: GoldAgent | None = None,
    **options: Any,
) -> dict[str, TaskResult]:
    agent_model.use(agent or GoldAgent())
    tasks = [BY_ID[i] for i in ids]
    results = await run_tasks(
        bench, tasks, customer, RunOptions(progress=lambda _: None, **options)
    )
    return {r.task.id: r for r in results}


def only_trial(result: TaskResult) -> Any:
    assert len(result.trials) == 1
    return result.trials[0]


class TestGoldReplay:
    async def test_every_shipped_task_scores_1_through_the_service(
        self,
        bench: Workbench,
        agent_model: ScriptedModelServer,
        customer: CustomerModel,
        tmp_path: Path,
    ) -> None:
        results = await run(bench, agent_model, customer, list(BY_ID))
        failed = {i: only_trial(r).reasons for i, r in results.items() if only_trial(r).reward != 1}
        assert failed == {}
        assert all(r.solvable for r in results.values())
        cancel = only_trial(results["cancel-two-orders"]).metrics
        assert (cancel.confirmations, cancel.declined, cancel.ended) == (2, 0, "stop")
        assert cancel.tool_calls == 5 and cancel.model_calls >= 6 and cancel.input_tokens > 0
        assert only_trial(results["handoff"]).metrics.handoffs == 1
        for worker in bench.workers:  # the rows trials changed are put back exactly
            await bench.reset(worker)
            after = await read_snapshot(worker.db, bench.baseline)
            assert diff(after, bench.baseline, bench.baseline) == []

        run_ = report.EvalRun(
            tasks_file="seed_tasks.json",
            data="seed",
            agent_model="gpt-4o-mini",
            agent_price=(0.15, 0.60),
            customer_model="scripted",
            customer_price=(0.0, 0.0),
            mode="customer",
            confirmation="required",
            trials=1,
            concurrency=2,
            started_at="now",
            seconds=1.0,
            results=list(results.values()),
        )
        report.write(run_, tmp_path)
        written = json.loads((tmp_path / "results.json").read_text())
        assert written["pass_hat_k"] == {"1": 1.0}
        assert all(t["trials"][0]["cost_usd"] > 0 for t in written["tasks"])
        assert "| 1 | 1.000 |" in (tmp_path / "report.md").read_text()
        assert (tmp_path / "transcripts" / "handoff--trial1.json").exists()


class TestWrongWrites:
    async def test_the_wrong_item_and_the_wrong_payment_method_score_0_with_a_diff(
        self, bench: Workbench, agent_model: ScriptedModelServer, customer: CustomerModel
    ) -> None:
        def wrong(task: Task, action: Action) -> dict[str, Any]:
            if action.name == "modify_pending_order_items":  # size 9, but leather
                return {**action.kwargs, "new_item_ids": ["1952701560"]}
            if action.name == "modify_pending_order_payment":  # a card, not PayPal
                return {**action.kwargs, "payment_method_id": "credit_card_6651257"}
            return action.kwargs

        ids = ["modify-items-card", "modify-payment-paypal"]
        results = await run(bench, agent_model, customer, ids, GoldAgent(mutate=wrong))
        item, payment = (only_trial(results[i]) for i in ids)
        assert (item.reward, payment.reward) == (0.0, 0.0)
        assert any(
            r.startswith(
                "data: order_items[#W8140105/1]: item_id: '1952701560', expected '8386801169'"
            )
            for r in item.reasons
        ), item.reasons
        assert any(
            r.startswith(
                "data: payment_transactions[#W6858393/1]: payment_method_id: "
                "'credit_card_6651257', expected 'paypal_6179698'"
            )
            for r in payment.reasons
        ), payment.reasons


class TestOutputs:
    async def test_a_missing_required_output_scores_0(
        self, bench: Workbench, agent_model: ScriptedModelServer, customer: CustomerModel
    ) -> None:
        ids = ["tracking-number", "order-total"]
        results = await run(bench, agent_model, customer, ids, GoldAgent(omit_outputs=True))
        assert only_trial(results["tracking-number"]).reasons == ["missing output: '367238976135'"]
        assert only_trial(results["order-total"]).reward == 0.0


class TestGuest:
    async def test_a_guest_proves_who_they_are_with_the_emailed_code(
        self, bench: Workbench, agent_model: ScriptedModelServer, customer: CustomerModel
    ) -> None:
        ids = ["cancel-by-mistake", "return-to-gift-card"]
        results = await run(bench, agent_model, customer, ids, guest=True)
        for result in results.values():
            trial = only_trial(result)
            assert trial.reward == 1.0, trial.reasons
            tools = [step["tool"] for step in trial.transcript if "tool" in step]
            assert tools[:2] == ["find_user_id_by_email", "confirm_identity"]
            inbox = [
                s["agent"] for s in trial.transcript if "verification code is" in s.get("agent", "")
            ]
            typed = [s["customer"] for s in trial.transcript if "customer" in s]
            assert inbox and _CODE.search(inbox[0]).group(1) in typed  # type: ignore[union-attr]


class TestPolicy:
    async def test_a_gold_action_our_rules_refuse_makes_the_task_unsolvable(
        self, bench: Workbench
    ) -> None:
        task = Task(
            id="cancel-processed",
            user_id="james_evans_5777",
            instruction="x",
            actions=(
                Action(
                    "cancel_pending_order", {"order_id": "#W6896244", "reason": "no longer needed"}
                ),
            ),
            outputs=(),
        )
        gold = await bench.gold(task)
        assert not gold.solvable
        assert gold.refused is not None and "only pending orders can be cancelled" in gold.refused
        assert (await bench.gold(BY_ID["cancel-by-mistake"])).solvable


class TestPassHatK:
    def test_pass_hat_k_is_taus_unbiased_estimate(self) -> None:
        def task(rewards: list[float]) -> TaskResult:
            trials = [TrialResult("t", i, r, [], TrialMetrics(), 0) for i, r in enumerate(rewards)]
            return TaskResult(BY_ID["handoff"], trials=trials)

        results = [task([1, 1, 0, 0]), task([1, 1, 1, 1]), task([0, 0, 0, 0])]
        assert report.pass_hat_k(results, 1) == pytest.approx((0.5 + 1 + 0) / 3)
        assert report.pass_hat_k(results, 2) == pytest.approx((1 / 6 + 1 + 0) / 3)
        assert report.pass_hat_k(results, 4) == pytest.approx(1 / 3)


TAU_FILE = """\
raise SystemExit("this file is read as data, never run")
from tau_bench.types import Task, Action

TASKS_TEST = [
    Task(
        annotator="0",
        user_id="james_evans_5777",
        instruction="You are James Evans. Cancel order #W6295317, you ordered it by mistake.",
        actions=[
            Action(name="find_user_id_by_email", kwargs={"email": "james.evans5219@example.com"}),
            Action(
                name="cancel_pending_order",
                kwargs={"order_id": "#W6295317", "reason": "ordered by mistake"},
            ),
        ],
        outputs=[],
    ),
    Task(
        annotator="1",
        user_id="james_evans_5777",
        instruction="You are James Evans. Ask what order #W3122821 cost.",
        actions=[Action(name="get_order_details", kwargs={"order_id": "#W3122821"})],
        outputs=["803.98"],
    ),
]
"""
OLD_STYLE_FILE = """\
tasks = [
    {
        "annotator": 0,
        "user_id": "wei_nguyen_5188",
        "instruction": "You are Wei Nguyen.",
        "actions": [{"name": "get_order_details", "arguments": {"order_id": "#W6667880"}}],
        "outputs": [12],
    },
]
"""


class TestImportTauBench:
    def test_task_files_are_read_as_data_into_our_task_json(self, tmp_path: Path) -> None:
        retail = tmp_path / "tau-bench" / "tau_bench" / "envs" / "retail"
        retail.mkdir(parents=True)
        (retail / "tasks_test.py").write_text(TAU_FILE)
        (retail / "tasks_train.py").write_text(OLD_STYLE_FILE)
        out = tmp_path / "test.json"
        cli_main(["eval", "import-tau-bench", str(tmp_path / "tau-bench"), "--out", str(out)])
        tasks = load_tasks(out)
        assert [t.id for t in tasks] == ["test-0", "test-1"]
        assert tasks[0].actions[1] == Action(
            "cancel_pending_order", {"order_id": "#W6295317", "reason": "ordered by mistake"}
        )
        assert (tasks[1].annotator, tasks[1].outputs) == ("1", ("803.98",))
        every = import_checkout(tmp_path / "tau-bench", "all")
        assert [t.id for t in every] == ["test-0", "test-1", "train-0"]
        assert every[2].actions[0].kwargs == {"order_id": "#W6667880"}
        assert every[2].outputs == ("12",)
