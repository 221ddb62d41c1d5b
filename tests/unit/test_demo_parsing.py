"""How the demo model reads one message: intents, ids, numbers, reasons, yes/no, addresses."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.demo.address import ParsedAddress, parse_address
from app.demo.parsing import (
    code_in,
    distance_in,
    email_in,
    intent_of,
    is_no,
    is_yes,
    item_ids_in,
    order_id_in,
    reason_in,
    wants_everything,
    weight_in,
)


class TestIntents:
    @pytest.mark.parametrize(
        ("text", "intent"),
        [
            ("Hi!", "greeting"),
            ("您好", "greeting"),
            ("what can you do?", "help"),
            ("你能做什么", "help"),
            ("where is my order #W2611340?", "status"),
            ("我的订单 #W2611340 到哪了", "status"),
            ("has it shipped yet", "status"),
            ("list my orders", "orders"),
            ("我的订单", "orders"),
            ("how much is shipping for 2 kg?", "shipping"),
            ("2 kg, 300 km", "shipping"),
            ("运费 2公斤 300公里", "shipping"),
            ("cancel order #W2611340", "cancel"),
            ("取消订单", "cancel"),
            ("change the address of #W2611340 to 1 Elm St, Austin, TX 78701", "address"),
            ("把订单的地址改成 1 Elm St", "address"),
            ("send order #W7588610 to 120 River Road, Baltimore, MD, USA, 21201?", "address"),
            ("please ship #W7588610 to my office at 9 Elm St, Austin, TX 78701", "address"),
            ("how much to ship 2 kg to 300 km, roughly?", "shipping"),
            ("return everything from #W7678072", "return"),
            ("我要退货", "return"),
            ("talk to a human", "human"),
            ("转人工", "human"),
        ],
    )
    def test_recognised(self, text: str, intent: str) -> None:
        assert intent_of(text) == intent

    @pytest.mark.parametrize(
        "text", ["#W2611340", "noah@example.com", "ordered by mistake", "yes", "2 kg", "asdf"]
    )
    def test_bare_details_are_not_intents(self, text: str) -> None:
        assert intent_of(text) is None

    def test_asking_whether_an_order_was_cancelled_is_not_cancelling_it(self) -> None:
        assert intent_of("was #W2611340 cancelled?") != "cancel"


class TestDetails:
    @pytest.mark.parametrize(
        "text", ["#W2611340", "order w2611340 please", "订单W2611340", "# W2611340"]
    )
    def test_order_ids_are_normalised(self, text: str) -> None:
        assert order_id_in(text) == "#W2611340"

    def test_not_an_order_id(self) -> None:
        assert order_id_in("W26113401") is None
        assert order_id_in("XW2611340") is None

    def test_one_time_code(self) -> None:
        assert code_in("my code is 123456") == "123456"
        assert code_in("123 456") == code_in("123-456") == code_in("验证码123456") == "123456"
        for text in ("#W1234567", "item 1234567890", "zip 78701", "2 kg 300 km", "W123456"):
            assert code_in(text) is None, text

    def test_email(self) -> None:
        assert email_in("it's Noah.Brown7922@example.com.") == "Noah.Brown7922@example.com"
        assert email_in("no email here @ all") is None

    def test_weights_and_distances(self) -> None:
        assert weight_in("2.5 kg") == Decimal("2.5")
        assert weight_in("3 kilograms") == Decimal("3")
        assert weight_in("2公斤") == Decimal("2")
        assert distance_in("over 300 km") == Decimal("300")
        assert distance_in("1,5 千米") == Decimal("1.5")
        assert weight_in("300 km") is None and distance_in("2 kg") is None

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            ("I ordered it by mistake", "ordered by mistake"),
            ("买错了", "ordered by mistake"),
            ("I don't need it anymore", "no longer needed"),
            ("no longer needed", "no longer needed"),
            ("不需要了", "no longer needed"),
            ("because reasons", None),
        ],
    )
    def test_cancel_reasons(self, text: str, reason: str | None) -> None:
        assert reason_in(text) == reason

    @pytest.mark.parametrize("text", ["yes", "Yes please!", "ok", "确认", "好的", "go ahead"])
    def test_yes(self, text: str) -> None:
        assert is_yes(text) and not is_no(text)

    @pytest.mark.parametrize("text", ["no", "No thanks", "不要", "算了", "nope"])
    def test_no(self, text: str) -> None:
        assert is_no(text) and not is_yes(text)

    def test_a_long_message_starting_with_yes_is_not_a_plain_yes(self) -> None:
        assert not is_yes("yes " + "and also something else entirely " * 3)

    def test_items(self) -> None:
        assert item_ids_in("return 1176194968 and 8106223139, 1176194968") == [
            "1176194968",
            "8106223139",
        ]
        assert wants_everything("return everything") and wants_everything("全部退货")
        assert not wants_everything("return the boots")


class TestAddress:
    def test_six_parts(self) -> None:
        assert parse_address("to 123 Main St, Apt 4, Austin, TX, USA, 78701") == ParsedAddress(
            "123 Main St", "Apt 4", "Austin", "TX", "USA", "78701"
        )

    def test_state_and_zip_together_and_no_country_means_usa(self) -> None:
        assert parse_address("123 Main St, Austin, TX 78701") == ParsedAddress(
            "123 Main St", "", "Austin", "TX", "USA", "78701"
        )

    def test_chinese_lead_in_and_commas(self) -> None:
        parsed = parse_address("地址改成 5 Elm Rd，Boston，MA，USA，02134")
        assert parsed == ParsedAddress("5 Elm Rd", "", "Boston", "MA", "USA", "02134")

    @pytest.mark.parametrize("trailer", [" instead?", "?", " please.", " instead, thanks!"])
    def test_words_after_the_zip_are_not_part_of_it(self, trailer: str) -> None:
        text = f"send it to 120 River Road, Baltimore, MD, USA, 21201{trailer}"
        assert parse_address(text) == ParsedAddress(
            "120 River Road", "", "Baltimore", "MD", "USA", "21201"
        )

    def test_missing_parts_are_named(self) -> None:
        parsed = parse_address("please change it to 123 Main St, Austin")
        assert parsed is not None and parsed.missing == ["state", "country", "zip"]

    @pytest.mark.parametrize("text", ["my address is wrong", "Austin", "hello, world"])
    def test_not_an_address(self, text: str) -> None:
        assert parse_address(text) is None

    def test_one_line(self) -> None:
        parsed = ParsedAddress("1 A St", "", "Austin", "TX", "USA", "78701")
        assert parsed.one_line() == "1 A St, Austin, TX 78701, USA"
