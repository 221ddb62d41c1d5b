"""`cs-agent eval record` and the replay of what it records, end to end: real conversations
with the real service (real Postgres, a service process over HTTP), recorded from its
database, replayed by `cs-agent eval --tasks` on a shop built from the task file alone.

Only the models are scripted, each an OpenAI-compatible server: the agent's model follows
a plan per conversation (found by the customer's first line): the recorded conversations'
plans while recording, the task file's gold actions when replaying. The customer is the
built-in scripted customer, saying the recorded lines.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from app.analytics.sweep import SweepPolicy, sweep
from app.cli import main as cli_main
from app.config import Settings
from app.db.erase import erase_user
from app.db.pool import open_pool
from app.db.seed import generate
from app.eval.client import ServiceClient
from app.eval.command import EvalConfig, evaluate
from app.eval.record import RecordOptions, record
from app.eval.simulator import OpenAIChat
from app.eval.tasks import Task, dump_tasks, load_tasks
from app.eval.workers import Workbench, Worker
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.pg import admin_url

Plan = list[tuple[str, dict[str, Any]]]
_CODE = re.compile(r"\b(\d{6})\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
IDENTITY_TOOLS = ("find_user_id_by_email", "confirm_identity")


class PlanAgent:
    """The agent's model: the conversation's plan, found by the customer's first line, one
    call at a time. As a guest's agent it first asks for the email, starts the check and
    confirms the emailed code."""

    def __init__(self, plans: Callable[[str], Plan | None], *, guest: bool = False) -> None:
        self.plans = plans
        self.guest = guest

    def __call__(self, request: ChatRequest) -> Reply:
        plan = self.plans(request.first_user_text())
        if plan is None or not request.tools:
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
        said = request.last_user_text() if last.get("role") == "user" else ""
        if self.guest:
            step = self._verify(results, said, last)
            if step is not None:
                return step
        done = [name for name, _ in results if name not in IDENTITY_TOOLS]
        if len(done) < len(plan):
            name, kwargs = plan[len(done)]
            return Reply.call(name, **kwargs)
        if last.get("role") == "tool":
            return Reply.say("All done.")
        return Reply.say("Is there anything else I can help with?")

    def _verify(
        self, results: Sequence[tuple[str, str]], said: str, last: dict[str, Any]
    ) -> Reply | None:
        if any(name == "confirm_identity" for name, _ in results):
            return None
        if last.get("role") == "tool" and "Verification started" in results[-1][1]:
            return Reply.say("I have emailed you a 6-digit code. Please type it here.")
        if any(name == "find_user_id_by_email" for name, _ in results):
            code = _CODE.search(said)
            return Reply.call("confirm_identity", code=code.group(1)) if code else None
        email = _EMAIL.search(said)
        if email:
            return Reply.call("find_user_id_by_email", email=email.group(0))
        return Reply.say("First I need to verify who you are. What is the email on your account?")


# What the customers said, and what the agent did, while recording.
CANCEL = "Please cancel order #W9020639, I ordered it by mistake."
ADDRESS = "Can you send order #W7588610 to 120 River Road, Baltimore, MD, USA, 21201 instead?"
HANDOFF = "I'd like to talk to a human agent, please."
OMAR_CANCEL = "I need to cancel order #W3593107, I no longer need it."
OMAR_ADDRESS = "Please send order #W3419742 to 55 Elm Street, Apt 2, Denver, CO, USA, 80202."
OMAR_LATER = "Please cancel order #W3419742 as well, I no longer need it."
REFUSED = "Cancel order #W6896244 please, I no longer need it."
MOVED = "I moved. Please change the address on my account to 77 Harbor View Court, Milwaukee."
RECORDING_PLANS: dict[str, Plan] = {
    CANCEL: [("cancel_pending_order", {"order_id": "#W9020639", "reason": "ordered by mistake"})],
    ADDRESS: [
        (
            "modify_pending_order_address",
            {
                "order_id": "#W7588610",
                "address1": "120 River Road",
                "address2": "",
                "city": "Baltimore",
                "state": "MD",
                "country": "USA",
                "zip": "21201",
            },
        )
    ],
    HANDOFF: [
        (
            "transfer_to_human_agents",
            {"summary": "Grace Fischer (grace.fischer7760@example.com) asked for a person."},
        )
    ],
    OMAR_CANCEL: [
        ("cancel_pending_order", {"order_id": "#W3593107", "reason": "no longer needed"})
    ],
    OMAR_ADDRESS: [
        (
            "modify_pending_order_address",
            {
                "order_id": "#W3419742",
                "address1": "55 Elm Street",
                "address2": "Apt 2",
                "city": "Denver",
                "state": "CO",
                "country": "USA",
                "zip": "80202",
            },
        )
    ],
    OMAR_LATER: [("cancel_pending_order", {"order_id": "#W3419742", "reason": "no longer needed"})],
    REFUSED: [("cancel_pending_order", {"order_id": "#W6896244", "reason": "no longer needed"})],
    MOVED: [
        (
            "modify_user_address",
            {
                "user_id": "daniel_collins_5469",
                "address1": "77 Harbor View Court",
                "address2": "",
                "city": "Milwaukee",
                "state": "WI",
                "country": "USA",
                "zip": "53202",
            },
        )
    ],
}
SERVICE_ENV = {
    "LLM_PROVIDER": "openai",
    "OPENAI_API_KEY": "test",
    "LLM_MODEL": "gpt-4o-mini",
    "LLM_MAX_RETRIES": "0",
    "WRITE_CONFIRMATION": "required",
}


def replaying(tasks: Sequence[Task]) -> Callable[[str], Plan | None]:
    by_line = {t.customer_lines[0]: t for t in tasks}

    def plan(first_line: str) -> Plan | None:
        task = by_line.get(first_line)
        return None if task is None else [(a.name, dict(a.kwargs)) for a in task.actions]

    return plan


def wrong_payment_method(tasks: Sequence[Task]) -> Callable[[str], Plan | None]:
    """The sabotaged agent: before a cancellation it moves the order to the customer's other
    card, so the refund goes to the wrong payment method."""
    gold = replaying(tasks)

    def plan(first_line: str) -> Plan | None:
        steps = gold(first_line)
        if steps is None:
            return None
        out: Plan = []
        for name, kwargs in steps:
            if name == "cancel_pending_order" and kwargs["order_id"] == "#W9020639":
                out.append(
                    (
                        "modify_pending_order_payment",
                        {"order_id": "#W9020639", "payment_method_id": "credit_card_2510528"},
                    )
                )
            out.append((name, kwargs))
        return out

    return plan


@dataclass
class Shop:
    """The service the conversations were had with, and their thread ids by first line."""

    bench: Workbench
    worker: Worker
    threads: dict[str, str]


async def converse(shop_bench: Workbench, worker: Worker, user_id: str, line: str) -> str:
    assert worker.http is not None
    client = ServiceClient(worker.http, shop_bench.token(user_id, "customer"))
    session = await client.new_thread()
    events = await client.send(session, line)
    while events.pending:
        events = await client.resume(session, approve=True)
    return f"{user_id}:{session}"


@pytest.fixture(scope="module")
def agent_model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(PlanAgent(RECORDING_PLANS.get)) as server:
        yield server


@pytest.fixture(scope="module")
async def shop(agent_model: ScriptedModelServer, tmp_path_factory: Any) -> AsyncIterator[Shop]:
    """The seed shop, served by the service, and the conversations customers had with it:
    Omar's three one after another (a cancel, an address change, then that order
    cancelled too), so the second one's start lies between two other writes."""
    agent_model.use(PlanAgent(RECORDING_PLANS.get))
    async with Workbench(
        server_url=admin_url(),
        data=generate(),
        size=1,
        log_dir=tmp_path_factory.mktemp("shop-logs"),
        service_env={**SERVICE_ENV, "OPENAI_BASE_URL": agent_model.base_url},
        progress=lambda _: None,
    ) as bench:
        worker = bench.workers[0]
        threads = {}
        for user_id, line in (
            ("kenji_white_3551", CANCEL),
            ("yuki_cooper_2791", ADDRESS),
            ("grace_fischer_8662", HANDOFF),
            ("omar_scott_2417", OMAR_CANCEL),
            ("omar_scott_2417", OMAR_ADDRESS),
            ("omar_scott_2417", OMAR_LATER),
            ("james_evans_5777", REFUSED),
            ("daniel_collins_5469", MOVED),
        ):
            threads[line] = await converse(bench, worker, user_id, line)
        yield Shop(bench, worker, threads)


def replay_settings() -> Settings:
    return Settings(database_url=admin_url(), _env_file=None)


async def replay(
    agent_model: ScriptedModelServer,
    tasks_file: Path,
    out: Path,
    agent: PlanAgent,
    *,
    guest: bool = False,
) -> dict[str, Any]:
    """`cs-agent eval --tasks FILE` (no --data), with the scripted agent; its results.json."""
    agent_model.use(agent)
    config = EvalConfig(
        tasks=tasks_file,
        out=out,
        guest=guest,
        service_env={**SERVICE_ENV, "OPENAI_BASE_URL": agent_model.base_url},
    )
    await evaluate(config, replay_settings(), progress=lambda _: None)
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


def rewards(results: dict[str, Any]) -> dict[str, list[float]]:
    return {t["id"]: [trial["reward"] for trial in t["trials"]] for t in results["tasks"]}


class TestBeforeImages:
    async def test_a_write_keeps_the_rows_it_locked_as_they_were(self, shop: Shop) -> None:
        cur = await shop.worker.db.execute(
            "SELECT ok, before_image FROM audit_log WHERE thread_id = %s",
            (shop.threads[CANCEL],),
        )
        [row] = await cur.fetchall()
        image = row["before_image"]
        assert row["ok"] and set(image) == {"order:#W9020639", "customer:kenji_white_3551"}
        order = image["order:#W9020639"]
        assert order["orders"][0]["status"] == "pending"  # as it was, not "cancelled"
        assert [p["transaction_type"] for p in order["payment_transactions"]] == ["payment"]
        assert len(order["order_items"]) >= 1 and "updated_at" not in order["orders"][0]
        methods = image["customer:kenji_white_3551"]["payment_methods"]
        assert {m["id"] for m in methods} == {
            "gift_card_6028959",
            "credit_card_2510528",
            "paypal_4645169",
        }
        cur = await shop.worker.db.execute("SELECT status FROM orders WHERE id = '#W9020639'")
        assert (await cur.fetchone()) == {"status": "cancelled"}

    async def test_a_refused_write_keeps_none_and_a_handoff_an_empty_one(self, shop: Shop) -> None:
        cur = await shop.worker.db.execute(
            "SELECT thread_id, ok, before_image FROM audit_log WHERE thread_id = ANY(%s)",
            ([shop.threads[REFUSED], shop.threads[HANDOFF]],),
        )
        rows = {r["thread_id"]: r for r in await cur.fetchall()}
        refused, handoff = rows[shop.threads[REFUSED]], rows[shop.threads[HANDOFF]]
        assert (refused["ok"], refused["before_image"]) == (False, None)
        assert (handoff["ok"], handoff["before_image"]) == (True, {})

    async def test_erasing_a_customer_drops_names_emails_and_addresses_from_images(
        self, shop: Shop
    ) -> None:
        settings = Settings(database_url=shop.worker.url, _env_file=None)
        pool = await open_pool(shop.worker.url, settings, name="test-erase")
        try:
            await erase_user(pool, "daniel_collins_5469")
        finally:
            await pool.close()
        cur = await shop.worker.db.execute(
            "SELECT tool_name, before_image FROM audit_log"
            " WHERE customer_id = 'daniel_collins_5469'"
        )
        [row] = await cur.fetchall()
        assert row["tool_name"] == "modify_user_address"
        [customer] = row["before_image"]["customer:daniel_collins_5469"]["customers"]
        assert customer == {"id": "daniel_collins_5469"}  # every other column is personal
        methods = row["before_image"]["customer:daniel_collins_5469"]["payment_methods"]
        assert methods and all("source" in m and "customer_id" in m for m in methods)


class TestRecordAndReplay:
    async def test_three_recorded_conversations_replay_to_1_and_a_wrong_refund_to_0(
        self,
        shop: Shop,
        agent_model: ScriptedModelServer,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        tasks_file = tmp_path / "tasks.json"
        ids = ",".join(shop.threads[line] for line in (CANCEL, ADDRESS, HANDOFF))
        monkeypatch.setenv("DATABASE_URL", shop.worker.url)
        for name in ("USER_SIM_BASE_URL", "USER_SIM_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        # the command runs its own event loop: off this test's
        await asyncio.to_thread(
            cli_main, ["eval", "record", "--threads", ids, "--out", str(tasks_file)]
        )
        tasks = load_tasks(tasks_file)
        cancel, address, handoff = tasks  # in the order asked for
        assert [a.name for a in cancel.actions] == ["cancel_pending_order"]
        assert cancel.customer_lines == (CANCEL, "yes")
        assert [a.name for a in address.actions] == ["modify_pending_order_address"]
        assert handoff.expected is not None and handoff.expected["handoff"] is True
        assert handoff.expected["result"] == "handed_off"
        # the file carries its records: the replay runs on no other shop
        assert cancel.data is not None and "#W9020639" in cancel.data["orders"]
        assert cancel.data["orders"]["#W9020639"]["status"] == "pending"

        baseline = await replay(
            agent_model, tasks_file, tmp_path / "baseline", PlanAgent(replaying(tasks))
        )
        assert rewards(baseline) == {cancel.id: [1.0], address.id: [1.0], handoff.id: [1.0]}
        assert "recorded tasks' own records" in baseline["data"]

        candidate = await replay(
            agent_model,
            tasks_file,
            tmp_path / "candidate",
            PlanAgent(wrong_payment_method(tasks)),
        )
        assert rewards(candidate) == {cancel.id: [0.0], address.id: [1.0], handoff.id: [1.0]}

        with pytest.raises(SystemExit) as failed:
            cli_main(
                [
                    "eval",
                    "compare",
                    str(tmp_path / "baseline"),
                    str(tmp_path / "candidate"),
                    "--fail-on-regression",
                ]
            )
        assert failed.value.code == 1
        written = json.loads((tmp_path / "candidate" / "compare.json").read_text())
        assert written["regressions"] == [cancel.id]
        [row] = [t for t in written["tasks"] if t["id"] == cancel.id]
        assert [c["name"] for c in row["actions"]["added"]] == ["modify_pending_order_payment"]
        assert row["actions"]["missing"] == [] and row["actions"]["changed"] == []
        report = (tmp_path / "candidate" / "compare.md").read_text()
        assert f"### {cancel.id}: regressed" in report
        assert "- added: `modify_pending_order_payment` (write)" in report

        # the other way round only improves: exit status 0
        cli_main(
            [
                "eval",
                "compare",
                str(tmp_path / "candidate"),
                str(tmp_path / "baseline"),
                "--fail-on-regression",
                "--out",
                str(tmp_path / "reverse"),
            ]
        )
        reverse = json.loads((tmp_path / "reverse" / "compare.json").read_text())
        assert (reverse["regressions"], reverse["improvements"]) == ([], [cancel.id])


class TestSnapshotAtStart:
    async def test_a_conversation_replays_from_the_records_as_they_were_at_its_start(
        self, shop: Shop, agent_model: ScriptedModelServer, tmp_path: Path
    ) -> None:
        options = RecordOptions(threads=[shop.threads[OMAR_ADDRESS]], keep_personal_data=True)
        recorded = await record(shop.worker.db, options)
        [task] = recorded.tasks
        assert task.data is not None and task.expected is not None
        orders = task.data["orders"]
        # the cancel before it is in; the cancel after it is not
        assert orders["#W3593107"]["status"] == "cancelled"
        assert orders["#W3419742"]["status"] == "pending"
        assert orders["#W3419742"]["address"]["address1"] != "55 Elm Street"
        cur = await shop.worker.db.execute("SELECT status FROM orders WHERE id = '#W3419742'")
        assert (await cur.fetchone()) == {"status": "cancelled"}  # how it is now
        after = task.expected["records"]["orders"]["#W3419742"]
        assert (after["status"], after["address"]["address1"]) == ("pending", "55 Elm Street")

        tasks_file = tmp_path / "tasks.json"
        dump_tasks(recorded.tasks, tasks_file)
        results = await replay(
            agent_model, tasks_file, tmp_path / "run", PlanAgent(replaying([task]))
        )
        assert rewards(results) == {task.id: [1.0]}, results["tasks"][0]["trials"][0]["reasons"]


class TestPersonalData:
    async def test_fakes_are_consistent_and_a_guest_still_proves_who_they_are(
        self, shop: Shop, agent_model: ScriptedModelServer, tmp_path: Path
    ) -> None:
        threads = [shop.threads[line] for line in (OMAR_CANCEL, OMAR_ADDRESS, HANDOFF)]
        recorded = await record(shop.worker.db, RecordOptions(threads=threads))
        tasks_file = tmp_path / "tasks.json"
        dump_tasks(recorded.tasks, tasks_file)
        text = tasks_file.read_text()
        real = generate()
        for user_id in ("omar_scott_2417", "grace_fischer_8662"):
            user = real.users[user_id]
            for value in (
                user_id,
                user["email"],
                user["name"]["first_name"],
                user["name"]["last_name"],
                user["address"]["address1"],
            ):
                assert value.lower() not in text.lower(), value
        for value in ("55 Elm Street", "Denver", "80202"):  # the new address a customer typed
            assert value not in text
        first, second, handoff = recorded.tasks
        assert first.user_id == second.user_id != "omar_scott_2417"
        assert first.data is not None and second.data is not None
        fake = first.data["users"][first.user_id]
        assert fake["email"] == second.data["users"][second.user_id]["email"]
        assert fake["email"] in first.instruction and fake["address"]["zip"] in first.instruction
        # the address a customer typed, the gold action's and the recorded outcome's agree
        [action] = second.actions
        assert action.kwargs["address1"] in second.customer_lines[0]
        assert second.expected is not None
        after = second.expected["records"]["orders"]["#W3419742"]["address"]
        assert after["address1"] == action.kwargs["address1"]
        assert "Grace" not in handoff.actions[0].kwargs["summary"]

        results = await replay(
            agent_model,
            tasks_file,
            tmp_path / "guest",
            PlanAgent(replaying(recorded.tasks), guest=True),
            guest=True,
        )
        assert rewards(results) == {t.id: [1.0] for t in recorded.tasks}
        steps = json.loads(
            (tmp_path / "guest" / "transcripts" / f"{first.id}--trial1.json").read_text()
        )
        tools = [(s["tool"], s["args"]) for s in steps if "tool" in s]
        assert tools[0] == ("find_user_id_by_email", {"email": fake["email"]})
        assert tools[1][0] == "confirm_identity"


class TestInstructionWriter:
    async def test_the_user_simulator_writes_it_from_the_faked_transcript(self, shop: Shop) -> None:
        """With USER_SIM_* set the model writes the instruction; it is asked for the
        customer's goal and knowledge, never the agent's actions, and sees no real data."""
        asked: list[ChatRequest] = []

        def writer(request: ChatRequest) -> Reply:
            asked.append(request)
            return Reply.say("You want order #W7588610 shipped to your new address.")

        with ScriptedModelServer(writer) as server:
            async with AsyncOpenAI(base_url=server.base_url, api_key="test") as client:
                options = RecordOptions(threads=[shop.threads[ADDRESS]])
                recorded = await record(shop.worker.db, options, OpenAIChat(client, "sim"))
        [task] = recorded.tasks
        [request] = asked
        prompt, transcript = (str(m["content"]) for m in request.messages)
        assert "never what the agent did" in prompt
        assert transcript.startswith("CUSTOMER: Can you send order #W7588610 to ")
        assert "120 River Road" not in transcript and "Baltimore" not in transcript
        assert task.data is not None
        fake = task.data["users"][task.user_id]
        assert task.instruction.startswith(f"You are {fake['name']['first_name']} ")
        assert fake["email"] in task.instruction
        assert task.instruction.endswith("You want order #W7588610 shipped to your new address.")


class TestSelection:
    async def test_since_picks_the_recent_conversations(self, shop: Shop) -> None:
        options = RecordOptions(since_s=3600.0, keep_personal_data=True)
        recorded = await record(shop.worker.db, options)
        lines = {t.customer_lines[0] for t in recorded.tasks}
        assert lines <= set(shop.threads)
        assert set(shop.threads) - {MOVED} <= lines  # MOVED's customer may be erased by now
        unknown = await record(shop.worker.db, RecordOptions(threads=["nobody:nothing"]))
        assert unknown.skipped == [("nobody:nothing", "no such conversation")]
        flagged = await record(shop.worker.db, RecordOptions(since_s=3600.0, flag="no_such"))
        assert flagged.tasks == []

    async def test_flag_and_result_choose_by_the_analytics_outcomes(self, shop: Shop) -> None:
        settings = Settings(database_url=shop.worker.url, _env_file=None)
        pool = await open_pool(shop.worker.url, settings, name="test-outcomes")
        try:
            assert await sweep(pool, SweepPolicy(idle_s=0.0)) is not None
        finally:
            await pool.close()

        async def first_lines(**chosen: Any) -> list[str]:
            options = RecordOptions(since_s=3600.0, keep_personal_data=True, **chosen)
            return [t.customer_lines[0] for t in (await record(shop.worker.db, options)).tasks]

        assert await first_lines(result="handed_off") == [HANDOFF]
        assert await first_lines(flag="policy_refusal") == [REFUSED]
