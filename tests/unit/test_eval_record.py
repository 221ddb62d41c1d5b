"""The pure parts of recording a conversation as a task: the transcript read from its runs,
the records rebuilt from before-images, the fakes, the task data a run loads, and the
ending a recorded task expects."""

from __future__ import annotations

from typing import Any

from app.agent.tool_exec import DECLINED
from app.db.transfer import TauData, parse
from app.eval.fakes import Fakes
from app.eval.instruction import Customer, template
from app.eval.rebuild import AuditRow, groups_after, groups_at, tau_data
from app.eval.reward import outcome_reasons
from app.eval.scripted import next_line
from app.eval.simulator import CONFIRM_QUESTION, STOP
from app.eval.taskdata import overlay, run_data, start_data
from app.eval.tasks import Task
from app.eval.transcript import read_runs


def customer(text: str) -> dict[str, Any]:
    return {"role": "user", "author": "customer", "content": text}


def agent(text: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"role": "assistant", "author": "agent", "content": text, "tool_calls": calls or []}


def tool(call_id: str, name: str, content: str, status: str = "success") -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "name": name,
        "content": content,
        "status": status,
    }


def paused(call_id: str, name: str, *messages: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": "interrupted",
        "messages": list(messages),
        "pending": [{"id": call_id, "name": name, "args": {}}],
    }


class TestTranscript:
    def test_lines_are_verbatim_with_each_confirmation_answered_as_the_customer_did(
        self,
    ) -> None:
        runs = [
            paused(
                "c1",
                "cancel_pending_order",
                customer("Cancel #W1 please"),
                agent(calls=[{"id": "c1", "name": "cancel_pending_order", "args": {"x": 1}}]),
            ),
            {"status": "completed", "messages": [tool("c1", "cancel_pending_order", DECLINED)]},
            paused("c2", "cancel_pending_order", customer("Actually, cancel #W2")),
            {"status": "completed", "messages": [tool("c2", "cancel_pending_order", "{}")]},
        ]
        said = read_runs(runs)
        assert said.customer_lines == ["Cancel #W1 please", "no", "Actually, cancel #W2", "yes"]
        assert said.declined == ["cancel_pending_order"]
        assert said.tool_calls == [{"name": "cancel_pending_order", "args": {"x": 1}}]

    def test_an_unanswered_confirmation_ends_the_lines_with_stop(self) -> None:
        said = read_runs([paused("c1", "cancel_pending_order", customer("Cancel #W1"))])
        assert said.customer_lines == ["Cancel #W1", STOP] and said.left_unanswered

    def test_a_typed_code_is_left_out_and_the_agents_part_ends_at_the_handoff(self) -> None:
        runs = [
            {"status": "completed", "messages": [customer("it's a@b.co"), customer("493027")]},
            paused("h", "transfer_to_human_agents", customer("a human please")),
            {"status": "completed", "messages": [tool("h", "transfer_to_human_agents", "ok")]},
            {"status": "handed_off", "messages": [customer("hello? for the person")]},
        ]
        said = read_runs(runs)
        assert said.customer_lines == ["it's a@b.co", "a human please", "yes"]
        assert said.handed_off


def order_group(status: str, payments: int) -> dict[str, list[dict[str, Any]]]:
    return {
        "orders": [
            {
                "id": "#W1",
                "customer_id": "u1",
                "position": 0,
                "address1": "1 Main St",
                "address2": "",
                "city": "Springfield",
                "state": "IL",
                "country": "USA",
                "zip": "62701",
                "status": status,
            }
        ],
        "order_items": [
            {
                "order_id": "#W1",
                "position": 0,
                "product_id": "p1",
                "item_id": "i1",
                "name": "Lamp",
                "price": 10.5,
                "options": {"color": "red"},
            }
        ],
        "fulfillments": [],
        "payment_transactions": [
            {
                "order_id": "#W1",
                "position": n,
                "transaction_type": "payment" if n == 0 else "refund",
                "amount": 10.5,
                "payment_method_id": "card_1",
            }
            for n in range(payments)
        ],
    }


CUSTOMER_GROUP = {
    "customers": [
        {
            "id": "u1",
            "first_name": "Ann",
            "last_name": "Lee",
            "email": "ann.lee@example.com",
            "address1": "1 Main St",
            "address2": "",
            "city": "Springfield",
            "state": "IL",
            "country": "USA",
            "zip": "62701",
        }
    ],
    "payment_methods": [
        {"id": "card_1", "customer_id": "u1", "source": "credit_card", "position": 0}
    ],
}


def write(id_: int, thread: str, image: dict[str, Any] | None) -> AuditRow:
    return AuditRow(id_, thread, "u1", "cancel_pending_order", {}, image is not None, image)


class TestRebuild:
    def test_a_group_is_as_the_first_later_write_found_it_else_as_now(self) -> None:
        now = {"order:#W1": order_group("cancelled", 2), "customer:u1": CUSTOMER_GROUP}
        later = [
            write(7, "t-mine", {"order:#W1": order_group("pending", 1)}),
            write(9, "t-other", {"order:#W1": order_group("pending (item modified)", 1)}),
        ]
        start = groups_at(now, later)
        assert start["order:#W1"]["orders"][0]["status"] == "pending"
        assert start["customer:u1"] is CUSTOMER_GROUP  # no later write locked it
        after = groups_after(now, later, "t-mine")
        # the thread's write left it as the next write (another thread's) found it
        assert after["order:#W1"]["orders"][0]["status"] == "pending (item modified)"
        assert groups_after(now, later, "t-other")["order:#W1"]["orders"][0]["status"] == (
            "cancelled"
        )

    def test_groups_read_back_as_tau_bench_data_that_imports(self) -> None:
        data = tau_data({"customer:u1": CUSTOMER_GROUP, "order:#W1": order_group("pending", 1)})
        assert data["users"]["u1"]["orders"] == ["#W1"]
        assert data["orders"]["#W1"]["payment_history"] == [
            {"transaction_type": "payment", "amount": 10.5, "payment_method_id": "card_1"}
        ]
        product = {
            "name": "Lamp",
            "product_id": "p1",
            "variants": {
                "i1": {
                    "item_id": "i1",
                    "options": {"color": "red"},
                    "available": True,
                    "price": 10.5,
                }
            },
        }
        shop = parse(TauData(users=data["users"], orders=data["orders"], products={"p1": product}))
        assert [o.status for o in shop.orders] == ["pending"]


class TestFakes:
    def test_a_value_maps_to_one_fake_everywhere_and_never_to_another_values(self) -> None:
        fakes = Fakes(key=b"test")
        email = fakes.email("Ann.Lee@example.com")
        assert email == fakes.email("ann.lee@example.com") != "ann.lee@example.com"
        assert fakes.first_name("Ann") != fakes.first_name("Bob")
        uid = fakes.user_id("ann_lee_1234", "Ann", "Lee")
        first, last = fakes.first_name("Ann"), fakes.last_name("Lee")
        assert uid.startswith(f"{first}_{last}_".lower())
        address = {"address1": "1 Main St", "city": "Springfield", "state": "IL", "zip": "62701"}
        faked = fakes.address(address)
        assert faked["state"] == "IL" and faked["zip"] != "62701"
        text = fakes.text("I'm ANN LEE, ann.lee@example.com, 1 Main St, Springfield 62701.")
        assert text == (
            f"I'm {first.upper()} {last.upper()}, {email}, {faked['address1']},"
            f" {faked['city']} {faked['zip']}."
        )

    def test_an_email_only_typed_in_text_is_replaced_too_and_always_alike(self) -> None:
        fakes = Fakes(key=b"test")
        once = fakes.text("write to someone@else.org")
        assert "someone@else.org" not in once and once.startswith("write to customer.")
        assert fakes.text("or to SOMEONE@else.org?") == once.replace("write", "or") + "?"


BASE = TauData(
    users={"u1": {"orders": ["#W1"]}, "u2": {"orders": ["#W2"]}},
    orders={"#W1": {"status": "pending"}, "#W2": {"status": "pending"}},
    products={"p1": {"name": "Lamp"}},
)


def recorded(user: str, status: str) -> Task:
    data = {
        "users": {user: {"orders": ["#W9"]}},
        "orders": {"#W9": {"status": status}},
        "products": {"p9": {"name": "Chair"}},
    }
    return Task("t", user, "x", (), (), data=data)


class TestTaskData:
    def test_the_run_holds_the_shop_plus_recorded_records_it_lacks(self) -> None:
        first, second = recorded("u9", "pending"), recorded("u9", "cancelled")
        data = run_data([first, second], BASE)
        assert set(data.users) == {"u1", "u2", "u9"} and data.orders["#W9"]["status"] == ("pending")
        assert set(data.products) == {"p1", "p9"} and "u9" not in BASE.users
        assert run_data([first], None).users == {"u9": {"orders": ["#W9"]}}

    def test_a_task_starts_from_its_own_records_and_keeps_the_others(self) -> None:
        base = run_data([recorded("u9", "pending")], BASE)
        start = start_data(base, recorded("u9", "cancelled"))
        assert start is not None and start.orders["#W9"]["status"] == "cancelled"
        assert start.orders["#W1"] == BASE.orders["#W1"]
        assert start_data(base, Task("plain", "u1", "x", (), ())) is None

    def test_an_outcome_over_the_start_replaces_only_the_orders_it_names(self) -> None:
        start = TauData(
            users={"u1": {"orders": ["#W1", "#W2"]}},
            orders={"#W1": {"status": "pending"}, "#W2": {"status": "pending"}},
        )
        after = overlay(
            start,
            {"users": {"u1": {"orders": ["#W1", "#W2"]}}, "orders": {"#W1": {"status": "x"}}},
        )
        assert after.orders == {"#W1": {"status": "x"}, "#W2": {"status": "pending"}}


class TestExpectedEnding:
    def test_a_recorded_handoff_and_decline_are_part_of_the_reward(self) -> None:
        handed = {"handoff": True, "declined": []}
        assert outcome_reasons(handed, handoffs=1, declined=0) == []
        assert outcome_reasons(handed, handoffs=0, declined=0) == [
            "outcome: no hand-over to a person; the recorded conversation had one"
        ]
        resolved = {"handoff": False, "declined": ["cancel_pending_order"]}
        assert len(outcome_reasons(resolved, handoffs=1, declined=0)) == 2
        assert outcome_reasons(resolved, handoffs=0, declined=1) == []
        assert outcome_reasons(None, handoffs=3, declined=0) == []  # a written task


class TestTemplate:
    def test_the_template_names_who_the_customer_is_and_quotes_what_they_said(self) -> None:
        who = Customer("alex_holt_1234", "Alex Holt", "customer.1@example.com", "12345")
        text = template(who, ["Cancel #W1", "no", STOP], handed_off=False)
        assert text.startswith("You are Alex Holt (user id alex_holt_1234, email customer.1@")
        assert '1. "Cancel #W1"' in text and "answered, in order: no." in text
        assert "left before answering" in text


class TestScriptedCustomer:
    def test_a_recorded_customer_who_left_unanswered_leaves_at_the_confirmation(self) -> None:
        task = Task("t", "u1", "x", (), (), customer_lines=("Cancel #W1", STOP))
        asked = f"Before I make this change, please confirm:\n- cancel\n{CONFIRM_QUESTION}"
        assert next_line(task, ["Hi!", asked], ["Cancel #W1"]) == STOP
        answered = Task("t", "u1", "x", (), (), customer_lines=("Cancel #W1", "no"))
        assert next_line(answered, ["Hi!", asked], ["Cancel #W1"]) == "no"
