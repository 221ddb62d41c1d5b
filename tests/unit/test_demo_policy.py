"""The demo model's policy on hand-built requests: each intent, English and Chinese, the guest
flow, tool failures, and garbage."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.agent.prompts import BUDGET_NOTE, system_prompt
from app.demo import policy as demo_policy
from app.demo.chat import ChatRequest, Reply
from app.demo.policy import DemoPolicy
from app.demo.texts import CONFIRM_MARK
from app.identity import AgentContext, Role
from app.tools.identity import CODE_SENT as CODE_SENT_TEMPLATE
from app.tools.results import found
from app.tools.text import customer_lines, generic_lines, order_lines, shipping_lines

NOAH = "noah_brown_6181"
PENDING, DELIVERED = "#W2611340", "#W7678072"
TOOLS = (
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "confirm_identity",
    "get_order_status",
    "get_user_details",
    "get_order_details",
    "calc_shipping",
    "cancel_pending_order",
    "modify_pending_order_address",
    "return_delivered_order_items",
    "transfer_to_human_agents",
)
DELIVERED_ORDER = {
    "order_id": DELIVERED,
    "user_id": NOAH,
    "items": [
        {
            "name": "T-Shirt",
            "product_id": "9523456873",
            "item_id": "1176194968",
            "price": 24.99,
            "options": {"color": "black", "size": "S"},
        },
        {
            "name": "Hiking Boots",
            "product_id": "7363354090",
            "item_id": "8106223139",
            "price": 214.95,
            "options": {"size": "9"},
        },
    ],
    "fulfillments": [
        {"tracking_id": ["357962501027"], "item_ids": ["1176194968"]},
        {"tracking_id": ["682308736931"], "item_ids": ["8106223139"]},
    ],
    "status": "delivered",
    "payment_history": [
        {"transaction_type": "payment", "amount": 239.94, "payment_method_id": "credit_card_78"}
    ],
}
PENDING_ORDER = {
    **DELIVERED_ORDER,
    "order_id": PENDING,
    "status": "pending",
    "fulfillments": [],
    "items": DELIVERED_ORDER["items"][:1],
    "payment_history": [
        {"transaction_type": "payment", "amount": 24.99, "payment_method_id": "paypal_57"}
    ],
}
CANCELLED_ORDER = {
    **PENDING_ORDER,
    "status": "cancelled",
    "cancel_reason": "ordered by mistake",
    "payment_history": [
        *PENDING_ORDER["payment_history"],
        {"transaction_type": "refund", "amount": 24.99, "payment_method_id": "paypal_57"},
    ],
}
DECLINED = "Declined: the customer did not approve this change, so it was NOT made."


@dataclass
class Chat:
    """A conversation as ChatOpenAI would send it, grown by the policy's own replies."""

    user_id: str = NOAH
    role: Role = "customer"
    verified_user_id: str | None = None
    tools: tuple[str, ...] = TOOLS
    handed_off: bool = False
    forced: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    policy: DemoPolicy = field(default_factory=DemoPolicy)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def request(self) -> ChatRequest:
        context = AgentContext(user_id=self.user_id, role=self.role, thread_id="t:s")
        system = str(
            system_prompt(context, self.verified_user_id, handed_off=self.handed_off).content
        )
        if self.forced:
            system += "\n" + BUDGET_NOTE
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {}}} for n in self.tools
        ]
        messages = [{"role": "system", "content": system}, *self.messages]
        return ChatRequest(messages=messages, tools=tools, model="gpt-4o-mini")

    def ask(self, text: str) -> Reply:
        self.messages.append({"role": "user", "content": text})
        return self.model()

    def model(self) -> Reply:
        reply = self.policy(self.request())
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json()},
                }
                for c in reply.tool_calls
            ]
        self.messages.append(message)
        return reply

    def result(self, content: str | dict[str, Any]) -> Reply:
        """Answer the last tool call with `content` (a dict as that tool's text), then ask
        the model."""
        call = self.messages[-1]["tool_calls"][0]
        text = content if isinstance(content, str) else shown(call["function"]["name"], content)
        self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        return self.model()


def shown(tool: str, value: dict[str, Any]) -> str:
    """`value` as the tool's own text, the format the model reads (OBSERVATION_FORMAT=text)."""
    render = RENDERERS.get(tool, lambda v: generic_lines(tool, v))
    return found(value, render).content("text", 4000)


RENDERERS: dict[str, Callable[[Any], Any]] = {
    "get_order_details": order_lines,
    "cancel_pending_order": order_lines,
    "modify_pending_order_address": order_lines,
    "return_delivered_order_items": order_lines,
    "get_user_details": lambda v: customer_lines({"payment_methods": {}, **v}),
    "calc_shipping": shipping_lines,
}


def called(reply: Reply) -> tuple[str, dict[str, Any]]:
    assert len(reply.tool_calls) == 1, reply
    call = reply.tool_calls[0]
    assert isinstance(call.arguments, dict)
    return call.name, dict(call.arguments)


def guest() -> Chat:
    return Chat(user_id="guest-1", role="guest")


class TestCapabilities:
    def test_a_greeting_gets_a_short_list_of_what_it_can_do(self) -> None:
        reply = Chat().ask("Hi there")
        assert not reply.tool_calls
        assert "where an order is" in reply.text and "cancel" in reply.text

    def test_what_can_you_do_is_answered_the_same_way(self) -> None:
        assert "estimate shipping" in Chat().ask("What can you do?").text

    def test_a_chinese_greeting_is_answered_in_chinese(self) -> None:
        reply = Chat().ask("你好")
        assert "查询订单状态" in reply.text

    def test_a_guest_is_told_an_email_will_be_needed(self) -> None:
        assert "email" in guest().ask("hello").text

    def test_anything_else_says_it_is_the_demo_model(self) -> None:
        reply = Chat().ask("Tell me a joke about penguins")
        assert not reply.tool_calls
        assert "demo model" in reply.text and "estimate shipping" in reply.text


class TestOrderStatus:
    def test_looks_the_order_up_then_answers_from_the_real_result(self) -> None:
        chat = Chat()
        assert called(chat.ask(f"Where is my order {DELIVERED}?")) == (
            "get_order_details",
            {"order_id": DELIVERED},
        )
        text = chat.result(DELIVERED_ORDER).text
        assert f"Order {DELIVERED} has been delivered." in text
        assert "T-Shirt (color black, size S): 24.99" in text
        assert "Hiking Boots (size 9): 214.95" in text
        assert "357962501027, 682308736931" in text
        assert "Total: 239.94." in text

    def test_chinese_question_and_answer(self) -> None:
        chat = Chat()
        assert called(chat.ask("我的订单 w2611340 到哪了？")) == (
            "get_order_details",
            {"order_id": PENDING},
        )
        text = chat.result(PENDING_ORDER).text
        assert f"订单 {PENDING} 尚未发货。" in text and "pending" not in text

    def test_asks_for_the_number_then_takes_a_bare_one(self) -> None:
        chat = Chat()
        assert "#W1234567" in chat.ask("where is my order?").text
        assert called(chat.ask(PENDING.lower().lstrip("#"))) == (
            "get_order_details",
            {"order_id": PENDING},
        )

    def test_a_failed_lookup_is_relayed_briefly(self) -> None:
        chat = Chat()
        chat.ask(f"status of {PENDING}")
        text = chat.result(
            f"Error: order {PENDING} was not found for this customer. Check the id."
        ).text
        assert (
            text
            == f"Sorry, I couldn't look that up: order {PENDING} was not found for this customer."
        )


class TestMyOrders:
    def test_lists_the_orders_of_the_user_in_the_system_prompt(self) -> None:
        chat = Chat()
        assert called(chat.ask("Can you list my orders?")) == (
            "get_user_details",
            {"user_id": NOAH},
        )
        text = chat.result({"user_id": NOAH, "orders": [DELIVERED, PENDING]}).text
        assert f"You have 2 orders: {DELIVERED}, {PENDING}." in text

    def test_a_verified_guest_uses_the_verified_id(self) -> None:
        chat = Chat(user_id="guest-1", role="guest", verified_user_id=NOAH)
        assert called(chat.ask("我的订单")) == ("get_user_details", {"user_id": NOAH})
        assert "您共有 1 个订单" in chat.result({"orders": [PENDING]}).text

    def test_no_orders(self) -> None:
        chat = Chat()
        chat.ask("my orders")
        assert "any orders" in chat.result({"orders": []}).text


class TestShipping:
    def test_english_estimate(self) -> None:
        chat = Chat()
        assert called(chat.ask("How much is shipping for 2 kg, 300 km?")) == (
            "calc_shipping",
            {"distance_km": 300, "weight_kg": 2},
        )
        text = chat.result({"shipping_cost": 249.00, "currency": "CNY"}).text
        assert text == "Shipping 2 kg over 300 km costs 249.00 CNY."

    def test_chinese_estimate(self) -> None:
        chat = Chat()
        assert called(chat.ask("运费 2.5公斤 300公里")) == (
            "calc_shipping",
            {"distance_km": 300, "weight_kg": 2.5},
        )
        assert "运费是 250.00 CNY" in chat.result({"shipping_cost": 250, "currency": "CNY"}).text

    def test_asks_for_what_is_missing_and_combines_the_answers(self) -> None:
        chat = guest()  # no identity needed for an estimate
        assert "distance in km" in chat.ask("what does shipping cost for 3 kg?").text
        assert called(chat.ask("1200 km")) == (
            "calc_shipping",
            {"distance_km": 1200, "weight_kg": 3},
        )

    def test_an_out_of_range_refusal_is_relayed(self) -> None:
        chat = Chat()
        chat.ask("shipping 2 kg 99999 km")
        text = chat.result("Error: distance_km must be at most 20000 km.").text
        assert "distance_km must be at most 20000 km." in text and "Error" not in text


class TestCancel:
    def test_an_explicit_request_with_a_reason_calls_the_tool_directly(self) -> None:
        chat = Chat()
        reply = chat.ask(f"Please cancel order {PENDING}, I ordered it by mistake")
        assert called(reply) == (
            "cancel_pending_order",
            {"order_id": PENDING, "reason": "ordered by mistake"},
        )

    def test_asks_for_the_reason_then_for_a_yes_then_cancels(self) -> None:
        chat = Chat()
        assert "no longer needed" in chat.ask(f"cancel {PENDING}").text
        confirm = chat.ask("I don't need it anymore")
        assert not confirm.tool_calls and CONFIRM_MARK["en"] in confirm.text
        assert "no longer needed" in confirm.text
        assert called(chat.ask("yes")) == (
            "cancel_pending_order",
            {"order_id": PENDING, "reason": "no longer needed"},
        )

    def test_chinese_flow_with_confirm(self) -> None:
        chat = Chat()
        assert "买错了" in chat.ask(f"取消订单 {PENDING}").text
        assert CONFIRM_MARK["zh"] in chat.ask("买错了").text
        assert called(chat.ask("确认")) == (
            "cancel_pending_order",
            {"order_id": PENDING, "reason": "ordered by mistake"},
        )

    def test_no_to_the_question_changes_nothing_and_a_later_yes_does_not_revive_it(
        self,
    ) -> None:
        chat = Chat()
        chat.ask(f"cancel {PENDING}")
        chat.ask("ordered by mistake")
        assert chat.ask("no").text == "Okay, I didn't change anything."
        assert not chat.ask("yes").tool_calls

    def test_a_yes_without_a_question_does_not_cancel(self) -> None:
        chat = Chat()
        chat.ask(f"cancel {PENDING}")
        reply = chat.ask("yes")  # the assistant asked for a reason, not a yes
        assert not reply.tool_calls and "no longer needed" in reply.text

    def test_approved_cancellation_confirms_and_explains_the_refund(self) -> None:
        chat = Chat()
        chat.ask(f"cancel order {PENDING} because ordered by mistake")
        text = chat.result(CANCELLED_ORDER).text
        assert f"order {PENDING} is cancelled" in text
        assert "refund of 24.99 goes back to PayPal" in text and "paypal_57" not in text

    def test_declined_change_says_nothing_was_changed(self) -> None:
        chat = Chat()
        chat.ask(f"cancel order {PENDING} because ordered by mistake")
        assert chat.result(DECLINED).text == "Okay, I didn't change anything."

    def test_a_refusal_is_relayed(self) -> None:
        chat = Chat()
        chat.ask(f"cancel order {DELIVERED}, no longer needed")
        text = chat.result("Error: the order is delivered; only pending orders can be cancelled.")
        assert text.text.startswith("Sorry, that didn't work: the order is delivered")


class TestCustomerWording:
    """What the customer reads names no internal id and words each status as a sentence."""

    @pytest.mark.parametrize(
        ("status", "sentence"),
        [
            ("cancelled", f"Order {PENDING} is cancelled."),
            ("return requested", f"A return has been requested for order {PENDING}."),
            ("exchange requested", f"An exchange has been requested for order {PENDING}."),
            ("pending (item modified)", f"Order {PENDING} is pending, with its items changed."),
        ],
    )
    def test_each_status_reads_as_a_sentence_said_once(self, status: str, sentence: str) -> None:
        chat = Chat()
        chat.ask(f"where is my order {PENDING}?")
        text = chat.result({**PENDING_ORDER, "status": status}).text
        first = text.splitlines()[0]
        assert first == sentence, text
        assert "It was cancelled" not in text

    @pytest.mark.parametrize(
        ("method", "words"),
        [
            ("paypal_57", "PayPal"),
            ("gift_card_7245904", "gift card ending 5904"),
            ("credit_card_78", "your credit card"),
        ],
    )
    def test_a_refund_names_the_payment_method_as_the_card_does(
        self, method: str, words: str
    ) -> None:
        chat = Chat()
        chat.ask(f"cancel order {PENDING} because ordered by mistake")
        paid = [{**p, "payment_method_id": method} for p in CANCELLED_ORDER["payment_history"]]
        text = chat.result({**CANCELLED_ORDER, "payment_history": paid}).text
        assert f"goes back to {words} " in text and method not in text

    def test_a_credit_card_the_conversation_listed_is_named_by_its_last_digits(self) -> None:
        chat = Chat()
        chat.ask("list my orders")
        cards = {"credit_card_78": {"source": "credit_card", "brand": "visa", "last_four": "2150"}}
        chat.result({"user_id": NOAH, "orders": [DELIVERED], "payment_methods": cards})
        chat.ask(f"return everything from {DELIVERED}")
        chat.result(DELIVERED_ORDER)  # an explicit request: the return is asked at once
        done = chat.result({**DELIVERED_ORDER, "status": "return requested"}).text
        assert "refunded to credit card ending 2150 once" in done and "credit_card_78" not in done

    def test_a_guest_order_status_is_a_sentence(self) -> None:
        chat = guest()
        chat.ask(f"where is my order {PENDING}? my email is noah.brown7922@example.com")
        text = chat.result(
            shown("get_order_status", {"order_id": PENDING, "status": "return requested"})
        ).text
        assert text.startswith(f"A return has been requested for order {PENDING}. For its")


class TestChangeAddress:
    NEW = "123 Main St, Apt 4, Austin, TX, USA, 78701"
    FIELDS: ClassVar[dict[str, str]] = {
        "address1": "123 Main St",
        "address2": "Apt 4",
        "city": "Austin",
        "state": "TX",
        "country": "USA",
        "zip": "78701",
    }

    def test_a_complete_request_calls_the_tool_with_parsed_fields(self) -> None:
        reply = Chat().ask(f"Change the address of {PENDING} to {self.NEW}")
        assert called(reply) == (
            "modify_pending_order_address",
            {"order_id": PENDING, **self.FIELDS},
        )

    def test_missing_parts_are_asked_for_then_confirmed(self) -> None:
        chat = Chat()
        ask = chat.ask(f"please update the address of {PENDING} to 123 Main St, Austin")
        assert "state, country, zip" in ask.text and not ask.tool_calls
        confirm = chat.ask(self.NEW)
        assert CONFIRM_MARK["en"] in confirm.text and "Austin, TX 78701, USA" in confirm.text
        assert called(chat.ask("Yes please")) == (
            "modify_pending_order_address",
            {"order_id": PENDING, **self.FIELDS},
        )

    def test_send_the_order_to_an_address_with_no_second_line(self) -> None:
        # The eval task order-address-no-unit, as its customer words it.
        reply = Chat().ask(
            f"Can you send order {PENDING} to 120 River Road, Baltimore, MD, USA, 21201 instead?"
        )
        assert called(reply) == (
            "modify_pending_order_address",
            {
                "order_id": PENDING,
                "address1": "120 River Road",
                "address2": "",
                "city": "Baltimore",
                "state": "MD",
                "country": "USA",
                "zip": "21201",
            },
        )

    def test_chinese_request(self) -> None:
        reply = Chat().ask(f"把订单 {PENDING} 的地址改成 {self.NEW}")
        assert called(reply)[0] == "modify_pending_order_address"

    def test_the_changed_address_is_read_back(self) -> None:
        chat = Chat()
        chat.ask(f"Change the address of {PENDING} to {self.NEW}")
        text = chat.result({**PENDING_ORDER, "address": self.FIELDS}).text
        assert (
            text
            == f"Done: order {PENDING} will now ship to 123 Main St, Apt 4, Austin, TX 78701, USA."
        )


class TestReturn:
    def test_everything_looks_the_order_up_then_returns_all_items_to_the_original_payment(
        self,
    ) -> None:
        chat = Chat()
        assert called(chat.ask(f"I want to return everything from {DELIVERED}")) == (
            "get_order_details",
            {"order_id": DELIVERED},
        )
        assert called(chat.result(DELIVERED_ORDER)) == (
            "return_delivered_order_items",
            {
                "order_id": DELIVERED,
                "item_ids": ["1176194968", "8106223139"],
                "payment_method_id": "credit_card_78",
            },
        )
        done = chat.result({**DELIVERED_ORDER, "status": "return requested"}).text
        assert "T-Shirt, Hiking Boots" in done and "239.94" in done

    def test_an_item_named_or_by_id(self) -> None:
        for text in (f"return the hiking boots from {DELIVERED}", f"退货 {DELIVERED} 8106223139"):
            chat = Chat()
            chat.ask(text)
            assert called(chat.result(DELIVERED_ORDER))[1]["item_ids"] == ["8106223139"]

    def test_asks_which_items_then_confirms(self) -> None:
        chat = Chat()
        chat.ask(f"return items from {DELIVERED}")
        ask = chat.result(DELIVERED_ORDER).text
        assert "T-Shirt (color black, size S) [1176194968]" in ask and "everything" in ask
        assert called(chat.ask("everything"))[0] == "get_order_details"
        confirm = chat.result(DELIVERED_ORDER).text
        assert CONFIRM_MARK["en"] in confirm and "refund 239.94 to your credit card." in confirm
        assert "credit_card_78" not in confirm
        chat.ask("yes")
        assert called(chat.result(DELIVERED_ORDER))[0] == "return_delivered_order_items"

    def test_an_order_that_is_not_delivered_cannot_be_returned(self) -> None:
        chat = Chat()
        chat.ask(f"return everything from {PENDING}")
        text = chat.result(PENDING_ORDER).text
        assert text == f"Order {PENDING} is pending. Only delivered orders can be returned."


class TestHuman:
    def test_transfers_with_a_summary(self) -> None:
        for text in ("I want to talk to a human", "转人工"):
            name, args = called(Chat().ask(text))
            assert name == "transfer_to_human_agents"
            assert NOAH in args["summary"] and text in args["summary"]

    def test_after_the_transfer(self) -> None:
        chat = Chat()
        chat.ask("real person please")
        assert "human colleague" in chat.result("Transfer successful").text
        assert "has this conversation" in Chat(handed_off=True).ask("hello?").text


CODE_SENT = CODE_SENT_TEMPLATE.format(digits=6, minutes=10)


class TestGuestVerification:
    """Under the old rules the email lookup's result verified the guest; now it only sends a
    code, and the guest is verified by confirm_identity with the code they type."""

    def test_asks_for_the_email_then_the_code_then_does_the_first_task(self) -> None:
        chat = guest()
        ask = chat.ask(f"cancel {PENDING}, I ordered it by mistake")
        assert not ask.tool_calls and "email" in ask.text and "code" in ask.text
        assert called(chat.ask("it's noah.brown7922@example.com")) == (
            "find_user_id_by_email",
            {"email": "noah.brown7922@example.com"},
        )
        sent = chat.result(CODE_SENT)
        assert not sent.tool_calls and "6-digit code" in sent.text
        assert called(chat.ask("123 456")) == ("confirm_identity", {"code": "123456"})
        chat.verified_user_id = NOAH  # the graph keeps the verified id in state
        assert called(chat.result(NOAH)) == (
            "cancel_pending_order",
            {"order_id": PENDING, "reason": "ordered by mistake"},
        )

    def test_the_verified_id_in_the_code_result_is_enough(self) -> None:
        chat = guest()
        chat.ask("list my orders")
        chat.ask("noah.brown7922@example.com")
        chat.result(CODE_SENT)
        chat.ask("654321")
        assert called(chat.result(NOAH)) == ("get_user_details", {"user_id": NOAH})

    def test_a_lookup_alone_verifies_nothing(self) -> None:
        chat = guest()
        chat.ask("list my orders")
        chat.ask("noah.brown7922@example.com")
        chat.result(CODE_SENT)
        reply = chat.ask("list my orders")
        assert not reply.tool_calls and "6-digit code" in reply.text

    def test_a_wrong_code_is_asked_again_and_a_used_up_one_asks_for_the_email(self) -> None:
        chat = guest()
        chat.ask("list my orders")
        chat.ask("noah.brown7922@example.com")
        chat.result(CODE_SENT)
        chat.ask("111111")
        wrong = chat.result("Not verified: that code is not correct; 4 attempt(s) left.")
        assert "isn't right" in wrong.text
        chat.ask("222222")
        used_up = chat.result("Not verified: that code is not correct and no attempts are left.")
        assert "Send me your email address again" in used_up.text
        assert called(chat.ask("noah.brown7922@example.com"))[0] == "find_user_id_by_email"

    def test_an_email_with_nothing_asked_before_then_the_code_just_verifies(self) -> None:
        chat = guest()
        chat.ask("hi")
        chat.ask("mia.garcia2723@example.com")
        chat.result(CODE_SENT)
        assert called(chat.ask("my code is 987654")) == ("confirm_identity", {"code": "987654"})
        verified = chat.result("mia_garcia_4516").text
        assert verified.startswith("Thanks, you're verified.") and "mia_garcia" not in verified
        chat = guest()
        chat.ask("mia.garcia2723@example.com")
        chat.result(CODE_SENT)
        assert called(chat.ask("验证码是987-654")) == ("confirm_identity", {"code": "987654"})
        verified = chat.result("mia_garcia_4516").text
        assert "已核实您的身份" in verified and "mia_garcia" not in verified

    def test_a_status_question_with_the_email_gets_the_status_only(self) -> None:
        chat = guest()
        assert "email" in chat.ask(f"where is my order {PENDING}").text
        assert called(chat.ask("it's noah.brown7922@example.com")) == (
            "get_order_status",
            {"order_id": PENDING, "email": "noah.brown7922@example.com"},
        )
        text = chat.result({"order_id": PENDING, "status": "pending"}).text
        assert text.startswith(f"Order {PENDING} is pending.") and "code" in text
        no_match = "Error: no order matches that order id and email address."
        chat.ask(f"and where is {DELIVERED}? noah.brown7922@example.com")
        assert "couldn't find an order" in chat.result(no_match).text

    def test_an_email_and_a_question_in_one_message(self) -> None:
        chat = guest()
        assert called(chat.ask(f"我的邮箱是 noah.brown7922@example.com，订单 {PENDING} 到哪了"))[
            0
        ] == ("get_order_status")
        assert called(guest().ask(f"取消订单 {PENDING}，买错了，邮箱 noah.brown7922@example.com"))[
            0
        ] == ("find_user_id_by_email")


class TestRobustness:
    def test_no_tools_offered_means_no_tool_calls(self) -> None:
        for chat in (Chat(tools=()), Chat(forced=True)):
            reply = chat.ask(f"where is {PENDING}")
            assert not reply.tool_calls and "can't look that up" in reply.text

    def test_a_tool_the_app_does_not_have_is_not_called(self) -> None:
        reply = Chat(tools=("get_order_details",)).ask("shipping 2 kg 300 km")
        assert not reply.tool_calls and "demo model" in reply.text

    def test_an_unexpected_tool_result_is_summarised(self) -> None:
        chat = Chat()
        chat.messages += [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "x1",
                        "type": "function",
                        "function": {"name": "get_product_details", "arguments": "{bad"},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "x1",
                "content": shown("get_product_details", {"name": "Lamp", "price": 9}),
            },
        ]
        assert chat.model().text == "Here is what I found: name: Lamp; price: 9.00 CNY"

    def test_a_result_for_an_unknown_call_and_several_results(self) -> None:
        chat = Chat()
        chat.messages += [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "nope", "content": "Error: interrupted. Retry."},
            {"role": "tool", "tool_call_id": "nope2", "content": "[1, 2]"},
        ]
        text = chat.model().text
        assert "interrupted." in text and "1, 2" in text

    def test_the_same_call_twice_in_a_turn_becomes_an_answer(self) -> None:
        chat = Chat()
        chat.ask(f"where is {PENDING}")
        chat.messages.append({"role": "tool", "tool_call_id": "call_0", "content": "{}"})
        chat.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c9",
                        "type": "function",
                        "function": {"name": "find_user_id_by_email", "arguments": "{}"},
                    }
                ],
            }
        )
        # after an identity result the policy goes on with the task: the same lookup again
        reply = chat.result(NOAH)
        assert not reply.tool_calls
        assert reply.text == f"Here is what I found: {NOAH}"

    def test_empty_and_odd_requests(self) -> None:
        policy = DemoPolicy()
        for messages in (
            [],
            [{"role": "system", "content": None}],
            [{"role": "user", "content": [{"type": "text", "text": "hi"}, "junk"]}],
            [{"role": "assistant", "tool_calls": "nope"}, {"role": "tool"}],
            [{"role": "user", "content": 42}],
        ):
            reply = policy(ChatRequest(messages=messages))
            assert reply.text and not reply.tool_calls

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["user", "assistant", "tool", "system"]),
                st.one_of(
                    st.text(max_size=80),
                    st.sampled_from(
                        [
                            "yes",
                            "确认",
                            f"cancel {PENDING}",
                            "return everything from #W7678072",
                            "Error: x",
                            "Declined: no",
                            json.dumps(DELIVERED_ORDER),
                            "a@b.co",
                            "2 kg 3 km",
                        ]
                    ),
                ),
                st.sampled_from([*TOOLS, "", "zzz"]),
            ),
            max_size=8,
        ),
        st.booleans(),
    )
    def test_never_raises_and_always_answers(
        self, parts: list[tuple[str, str, str]], as_guest: bool
    ) -> None:
        chat = guest() if as_guest else Chat()
        for i, (role, text, tool) in enumerate(parts):
            message: dict[str, Any] = {"role": role, "content": text}
            if role == "assistant":
                message["tool_calls"] = [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": tool, "arguments": text},
                    }
                ]
            if role == "tool":
                message["tool_call_id"] = f"c{i - 1}"
            chat.messages.append(message)
        reply = chat.policy(chat.request())
        assert reply.text or reply.tool_calls
        for call in reply.tool_calls:
            assert call.name in TOOLS


class TestNoLeaks:
    def test_an_internal_failure_becomes_a_polite_answer_without_its_text(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def broken(conversation: object) -> Reply:
            raise RuntimeError("secret internals: password=hunter2")

        monkeypatch.setattr(demo_policy, "_decide", broken)
        reply = Chat().ask("你好")
        assert not reply.tool_calls
        assert reply.text.startswith("抱歉") and "hunter2" not in reply.text


class TestNotesAfterResults:
    CACHED = "\n(cached: same result as an earlier identical call in this conversation)"
    REPEAT = "\n(Note: you already had this exact result earlier in this turn; do not ask again.)"

    def test_a_cached_order_is_still_read(self) -> None:
        chat = Chat()
        chat.ask(f"where is {PENDING}")
        text = chat.result(shown("get_order_details", PENDING_ORDER) + self.CACHED).text
        assert text.startswith(f"Order {PENDING} is pending.")

    def test_a_noted_identity_result_is_just_the_user_id(self) -> None:
        chat = guest()
        chat.ask("list my orders")
        chat.ask("noah.brown7922@example.com")
        chat.result(CODE_SENT)
        chat.ask("123456")
        assert called(chat.result(NOAH + self.REPEAT)) == ("get_user_details", {"user_id": NOAH})
