"""Tool results as the model reads them (each tool renders its own): a label line, fields,
numbered lists, bounded."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.agent.cache import CACHED_NOTE
from app.agent.tool_exec import cached
from app.domain.models import Customer, Order, Product, Transaction, Variant
from app.tools.identity import verified
from app.tools.registry import build_tools
from app.tools.render import customer_found, customer_view, order_found, order_view, product_found
from app.tools.results import Observation, error, found
from app.tools.text import DEFAULT_LIMIT, generic_lines, money, product_types_lines, shipping_lines
from tests import factories as f
from tests.factories import bottle, customer, gift_card, order


def shown(observation: Observation, limit: int = DEFAULT_LIMIT) -> str:
    """What the model reads of it (OBSERVATION_FORMAT=text)."""
    return observation.content("text", limit)


def order_text(o: Order, limit: int = DEFAULT_LIMIT) -> str:
    return shown(order_found(order_view(o)), limit)


def customer_text(c: Customer) -> str:
    return shown(customer_found(customer_view(c)))


def product_text(p: Product, limit: int = DEFAULT_LIMIT) -> str:
    return shown(product_found(p), limit)


def shipping_text(raw: str) -> str:
    return shown(found(json.loads(raw, parse_float=Decimal), shipping_lines))


def generic_text(name: str, value: Any, limit: int = DEFAULT_LIMIT) -> str:
    return shown(found(value, lambda v: generic_lines(name, v)), limit)


async def tool_text(name: str, **args: Any) -> str:
    tools = {
        t.name: t for t in build_tools(AsyncConnectionPool("postgresql://x/y", open=False)).all
    }
    tool: BaseTool = tools[name].bound("text")  # type: ignore[attr-defined]
    return f.text_of(await f.invoke(tool, args, f.tool_runtime()))


def big_product(n: int = 40) -> Product:
    variants = tuple(
        Variant(
            item_id=f"{1000000000 + i}",
            product_id="9523456873",
            options={"color": f"color{i}", "size": "M"},
            price=Decimal("20.00") + i,
            available=i % 4 != 0,
        )
        for i in range(n)
    )
    return Product(id="9523456873", name="T-Shirt", variants=variants)


class TestOrder:
    def test_label_line_says_status_items_and_payment(self) -> None:
        text = order_text(order())
        assert text.splitlines()[0] == (
            "Order #W0000001: pending, 3 items, paid 140.00 CNY by credit_card_1111111"
        )

    def test_fields_and_numbered_items_and_payments(self) -> None:
        lines = order_text(order()).splitlines()
        assert "user_id: sara_doe_496" in lines
        assert "ship to: 1 Elm St, Apt 2, Austin, TX 78701, USA" in lines
        bottle_line = (
            "Water Bottle: item_id 1000, product_id 8310926033, 50.00 CNY; capacity 1000ml"
        )
        assert f"  1. {bottle_line}" in lines
        lamp_line = "Desk Lamp: item_id 5000, product_id 6817146515, 30.00 CNY; color black"
        assert f"  3. {lamp_line}" in lines
        assert "  1. payment 140.00 CNY via credit_card_1111111" in lines

    def test_refunds_fulfillments_and_recorded_fields(self) -> None:
        paid = Transaction("payment", Decimal("1463.70"), "credit_card_1111111")
        refund = Transaction("refund", Decimal("1463.70"), "credit_card_1111111")
        cancelled = replace(
            order(status="cancelled", payments=(paid, refund)), cancel_reason="no longer needed"
        )
        text = order_text(cancelled)
        assert text.splitlines()[0] == (
            "Order #W0000001: cancelled, 3 items, paid 1,463.70 CNY by credit_card_1111111, "
            "refunded 1,463.70 CNY"
        )
        assert "cancel_reason: no longer needed" in text
        assert "  2. refund 1,463.70 CNY via credit_card_1111111" in text
        exchanged = replace(
            order(status="exchange requested"),
            exchange_items=("1000",),
            exchange_price_difference=Decimal("-4.50"),
        )
        text = order_text(exchanged)
        assert "exchange_items: 1000" in text
        assert "exchange_price_difference: -4.50 CNY" in text
        assert "  1. tracking 123456789: item_ids 1000, 2000, 5000" in text


class TestCustomer:
    def test_label_and_payment_methods(self) -> None:
        c = customer(
            payment_methods=(gift_card(balance="1234.5"),), order_ids=("#W1", "#W2", "#W3")
        )
        text = customer_text(c)
        lines = text.splitlines()
        assert lines[0] == "Customer sara_doe_496: Sara Doe, 1 payment method, 3 orders"
        assert "email: sara.doe@example.com" in lines
        assert "  1. gift_card_2222222: gift card, balance 1,234.50 CNY" in lines
        assert lines[-3:] == ["  1. #W1", "  2. #W2", "  3. #W3"]

    def test_cards_show_brand_and_last_four(self) -> None:
        text = customer_text(customer())
        assert "  1. credit_card_1111111: credit card, visa ending 9212" in text
        assert "  3. paypal_3333333: paypal" in text

    def test_without_user_id_the_name_labels_it(self) -> None:
        view = customer_view(customer())
        del view["user_id"]
        text = shown(customer_found(view))
        assert text.startswith("Customer Sara Doe, 3 payment methods, 0 orders")


class TestProduct:
    def test_label_options_and_variants_available_first(self) -> None:
        text = product_text(bottle(unavailable=("1000",)))
        lines = text.splitlines()
        assert lines[0] == (
            "Product Water Bottle (product_id 8310926033): 4 variants, 3 available, 45.50-80.00 CNY"
        )
        assert lines[1] == "options: capacity"
        assert lines[3:] == [
            "  1. 2000: 60.00 CNY; 2000ml",
            "  2. 3000: 45.50 CNY; 3000ml",
            "  3. 4000: 80.00 CNY; 4000ml",
            "  4. 1000: 50.00 CNY; 1000ml; NOT available",
        ]

    def test_variants_with_different_options_name_each_option(self) -> None:
        product = Product(
            id="1",
            name="Lamp",
            variants=(
                Variant("10", "1", {"color": "red"}, Decimal("5"), True),
                Variant("11", "1", {"size": "L"}, Decimal("5"), True),
            ),
        )
        text = product_text(product)
        assert text.splitlines()[0].endswith("2 variants, 2 available, 5.00 CNY")
        assert "  1. 10: 5.00 CNY; color red" in text
        assert "  2. 11: 5.00 CNY; size L" in text

    def test_product_types(self) -> None:
        types = {"T-Shirt": "9523456873", "Water Bottle": "8310926033"}
        assert shown(found(types, product_types_lines)) == (
            "Product types: 2 (name: product_id)\n  1. T-Shirt: 9523456873\n"
            "  2. Water Bottle: 8310926033"
        )


class TestSmallResults:
    def test_shipping_cost(self) -> None:
        assert shipping_text('{"shipping_cost":1234.5,"currency":"CNY"}') == (
            "Shipping cost: 1,234.50 CNY"
        )

    async def test_calculation_keeps_the_number_as_written(self) -> None:
        assert await tool_text("calculate", expression="1463.7 + 0") == "Result: 1463.7"

    def test_user_id_lookup(self) -> None:
        assert shown(verified("sara_doe_496", labelled=True)) == (
            "User id: sara_doe_496 (verified for this conversation)"
        )

    def test_plain_text_passes_through(self) -> None:
        assert shown(found("Transfer successful")) == ("Transfer successful")


class TestAmounts:
    def test_thousands_separators_and_cents(self) -> None:
        assert money(Decimal("1463.7")) == "1,463.70 CNY"
        assert money(1234567) == "1,234,567.00 CNY"
        assert money(Decimal("0.5")) == "0.50 CNY"
        assert money(Decimal("-12.345")) == "-12.34 CNY"  # half-even, as the calculator

    def test_amounts_are_read_exactly(self) -> None:
        raw = '{"shipping_cost":0.30000000000000004,"currency":"CNY"}'
        assert shipping_text(raw) == "Shipping cost: 0.30 CNY"
        raw = '{"shipping_cost":12345678901234.565,"currency":"CNY"}'
        assert shipping_text(raw) == "Shipping cost: 12,345,678,901,234.56 CNY"

    def test_huge_numbers_stay_short(self) -> None:
        raw = '{"shipping_cost":1e999999,"currency":"CNY"}'
        assert shipping_text(raw) == "Shipping cost: 1E+999999"

    def test_non_numbers_are_shown_as_they_are(self) -> None:
        assert money("n/a") == "n/a"
        assert money(None) == "null"


class TestLength:
    def test_cut_at_a_line_boundary_with_a_note(self) -> None:
        full = product_text(big_product(), limit=10**6)
        text = product_text(big_product(), limit=600)
        assert len(text) <= 600
        *kept, note = text.splitlines()
        assert all(line in full.splitlines() for line in kept)
        listed = sum(1 for line in kept if re.match(r"\s+\d+\. ", line))
        assert listed > 0
        hint = "ask the customer which options they want"
        assert note == f"(cut: {40 - listed} more variants not shown; {hint})"

    def test_available_variants_are_kept_before_unavailable_ones(self) -> None:
        text = product_text(big_product(), limit=600)
        assert "NOT available" not in text

    def test_label_line_always_survives(self) -> None:
        text = product_text(big_product(), limit=200)
        assert text.splitlines()[0].startswith("Product T-Shirt (product_id 9523456873): 40 ")

    @given(st.integers(1, 3000))
    def test_never_longer_than_the_limit(self, limit: int) -> None:
        assert len(product_text(big_product(), limit)) <= limit
        assert len(order_text(order(), limit)) <= limit
        assert len(shown(found("word " * 700), limit)) <= limit

    def test_long_plain_text_is_cut_with_a_note(self) -> None:
        text = shown(found("line of text\n" * 200), limit=100)
        assert len(text) <= 100
        assert text.splitlines()[0] == "line of text"
        assert re.fullmatch(r"\(cut: \d+ more characters\)", text.splitlines()[-1])

    def test_short_results_are_not_cut(self) -> None:
        text = order_text(order())
        assert "(cut:" not in text


class TestPassthroughAndFallback:
    def test_errors_pass_through_unchanged(self) -> None:
        sentence = "order #W1 was not found for this customer." + " x" * 2000
        raw = "Error: " + sentence
        assert shown(error("not_found", sentence), limit=100) == raw

    def test_unknown_json_is_flattened(self) -> None:
        value = {"ticket": {"id": 7, "tags": ["a", "b"]}, "rows": [{"price": 5}], "ok": True}
        assert generic_text("mystery_tool", value) == (
            "Result of mystery_tool: 3 fields\n"
            "ticket.id: 7\n"
            "ticket.tags: a, b\n"
            "rows[0].price: 5.00 CNY\n"
            "ok: true"
        )

    def test_unknown_json_is_cut_by_fields(self) -> None:
        text = generic_text("mystery_tool", {f"key{i}": "v" * 20 for i in range(100)}, 300)
        assert len(text) <= 300
        assert re.search(r"\(cut: \d+ more fields not shown; ask for a narrower query\)$", text)

    def test_json_list_and_scalar(self) -> None:
        assert generic_text("t", [1, 2]).splitlines()[0] == "Result of t: 2 entries"
        assert generic_text("t", None) == "Result of t: null"


class TestNotesOnResults:
    """A result served from the cache is the text the model read then, with a note."""

    def test_a_cache_hit_reads_as_the_stored_text_with_the_note(self) -> None:
        text = order_text(order())
        artifact = order_found(order_view(order())).artifact(cacheable=True)
        entry = {"content": text, "tags": [], "turn": 1, "artifact": artifact}
        call = {"name": "get_order_details", "args": {}, "id": "c1", "type": "tool_call"}
        hit = cached(call, entry)  # type: ignore[arg-type]
        assert hit.content == text + CACHED_NOTE
        assert hit.artifact == {**artifact, "cache": "hit"}
