"""Tool results as the model reads them: a label line, fields, numbered lists, bounded."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage

from app.agent.cache import CACHED_NOTE, REPEAT_HINT
from app.agent.model_view import formatted
from app.agent.observations import format_observation, money
from app.domain.models import Product, Transaction, Variant
from app.jsontext import compact_json
from app.tools.render import customer_json, order_json, product_json
from tests.factories import bottle, customer, gift_card, order


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
        text = format_observation("get_order_details", order_json(order()))
        assert text.splitlines()[0] == (
            "Order #W0000001: pending, 3 items, paid 140.00 CNY by credit_card_1111111"
        )

    def test_fields_and_numbered_items_and_payments(self) -> None:
        lines = format_observation("get_order_details", order_json(order())).splitlines()
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
        text = format_observation("cancel_pending_order", order_json(cancelled))
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
        text = format_observation("exchange_delivered_order_items", order_json(exchanged))
        assert "exchange_items: 1000" in text
        assert "exchange_price_difference: -4.50 CNY" in text
        assert "  1. tracking 123456789: item_ids 1000, 2000, 5000" in text


class TestCustomer:
    def test_label_and_payment_methods(self) -> None:
        c = customer(
            payment_methods=(gift_card(balance="1234.5"),), order_ids=("#W1", "#W2", "#W3")
        )
        text = format_observation("get_user_details", customer_json(c))
        lines = text.splitlines()
        assert lines[0] == "Customer sara_doe_496: Sara Doe, 1 payment method, 3 orders"
        assert "email: sara.doe@example.com" in lines
        assert "  1. gift_card_2222222: gift card, balance 1,234.50 CNY" in lines
        assert lines[-3:] == ["  1. #W1", "  2. #W2", "  3. #W3"]

    def test_cards_show_brand_and_last_four(self) -> None:
        text = format_observation("get_user_details", customer_json(customer()))
        assert "  1. credit_card_1111111: credit card, visa ending 9212" in text
        assert "  3. paypal_3333333: paypal" in text

    def test_without_user_id_the_name_labels_it(self) -> None:
        view = json.loads(customer_json(customer()))
        del view["user_id"]
        text = format_observation("get_user_details", json.dumps(view))
        assert text.startswith("Customer Sara Doe, 3 payment methods, 0 orders")


class TestProduct:
    def test_label_options_and_variants_available_first(self) -> None:
        text = format_observation(
            "get_product_details", product_json(bottle(unavailable=("1000",)))
        )
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
        text = format_observation("get_product_details", product_json(product))
        assert text.splitlines()[0].endswith("2 variants, 2 available, 5.00 CNY")
        assert "  1. 10: 5.00 CNY; color red" in text
        assert "  2. 11: 5.00 CNY; size L" in text

    def test_product_types(self) -> None:
        raw = compact_json({"T-Shirt": "9523456873", "Water Bottle": "8310926033"})
        assert format_observation("list_all_product_types", raw) == (
            "Product types: 2 (name: product_id)\n  1. T-Shirt: 9523456873\n"
            "  2. Water Bottle: 8310926033"
        )


class TestSmallResults:
    def test_shipping_cost(self) -> None:
        raw = compact_json({"shipping_cost": Decimal("1234.5"), "currency": "CNY"})
        assert format_observation("calc_shipping", raw) == "Shipping cost: 1,234.50 CNY"

    def test_calculation_keeps_the_number_as_written(self) -> None:
        assert format_observation("calculate", "1463.70") == "Result: 1463.70"

    def test_user_id_lookup(self) -> None:
        assert format_observation("find_user_id_by_email", "sara_doe_496") == (
            "User id: sara_doe_496 (verified for this conversation)"
        )

    def test_plain_text_passes_through(self) -> None:
        assert format_observation("transfer_to_human_agents", "Transfer successful") == (
            "Transfer successful"
        )


class TestAmounts:
    def test_thousands_separators_and_cents(self) -> None:
        assert money(Decimal("1463.7")) == "1,463.70 CNY"
        assert money(1234567) == "1,234,567.00 CNY"
        assert money(Decimal("0.5")) == "0.50 CNY"
        assert money(Decimal("-12.345")) == "-12.34 CNY"  # half-even, as the calculator

    def test_amounts_are_read_exactly(self) -> None:
        raw = '{"shipping_cost":0.30000000000000004,"currency":"CNY"}'
        assert format_observation("calc_shipping", raw) == "Shipping cost: 0.30 CNY"
        raw = '{"shipping_cost":12345678901234.565,"currency":"CNY"}'
        assert (
            format_observation("calc_shipping", raw) == "Shipping cost: 12,345,678,901,234.56 CNY"
        )

    def test_huge_numbers_stay_short(self) -> None:
        raw = '{"shipping_cost":1e999999,"currency":"CNY"}'
        assert format_observation("calc_shipping", raw) == "Shipping cost: 1E+999999"

    def test_non_numbers_are_shown_as_they_are(self) -> None:
        assert money("n/a") == "n/a"
        assert money(None) == "null"


class TestLength:
    def test_cut_at_a_line_boundary_with_a_note(self) -> None:
        full = format_observation("get_product_details", product_json(big_product()), limit=10**6)
        text = format_observation("get_product_details", product_json(big_product()), limit=600)
        assert len(text) <= 600
        *kept, note = text.splitlines()
        assert all(line in full.splitlines() for line in kept)
        shown = sum(1 for line in kept if re.match(r"\s+\d+\. ", line))
        assert shown > 0
        assert note == (
            f"(cut: {40 - shown} more variants not shown; ask the customer which options they want)"
        )

    def test_available_variants_are_kept_before_unavailable_ones(self) -> None:
        text = format_observation("get_product_details", product_json(big_product()), limit=600)
        assert "NOT available" not in text

    def test_label_line_always_survives(self) -> None:
        text = format_observation("get_product_details", product_json(big_product()), limit=200)
        assert text.splitlines()[0].startswith("Product T-Shirt (product_id 9523456873): 40 ")

    @given(st.integers(1, 3000))
    def test_never_longer_than_the_limit(self, limit: int) -> None:
        for raw in (product_json(big_product()), order_json(order()), "word " * 700):
            assert len(format_observation("get_product_details", raw, limit=limit)) <= limit

    def test_long_plain_text_is_cut_with_a_note(self) -> None:
        text = format_observation("transfer_to_human_agents", "line of text\n" * 200, limit=100)
        assert len(text) <= 100
        assert text.splitlines()[0] == "line of text"
        assert re.fullmatch(r"\(cut: \d+ more characters\)", text.splitlines()[-1])

    def test_short_results_are_not_cut(self) -> None:
        text = format_observation("get_order_details", order_json(order()))
        assert "(cut:" not in text


class TestPassthroughAndFallback:
    def test_errors_pass_through_unchanged(self) -> None:
        raw = "Error: order #W1 was not found for this customer." + " x" * 2000
        assert format_observation("get_order_details", raw, limit=100) == raw

    def test_unknown_json_is_flattened(self) -> None:
        raw = json.dumps(
            {"ticket": {"id": 7, "tags": ["a", "b"]}, "rows": [{"price": 5}], "ok": True}
        )
        assert format_observation("mystery_tool", raw) == (
            "Result of mystery_tool: 3 fields\n"
            "ticket.id: 7\n"
            "ticket.tags: a, b\n"
            "rows[0].price: 5.00 CNY\n"
            "ok: true"
        )

    def test_unknown_json_is_cut_by_fields(self) -> None:
        raw = json.dumps({f"key{i}": "v" * 20 for i in range(100)})
        text = format_observation("mystery_tool", raw, limit=300)
        assert len(text) <= 300
        assert re.search(r"\(cut: \d+ more fields not shown; ask for a narrower query\)$", text)

    def test_json_list_and_scalar(self) -> None:
        assert format_observation("t", "[1, 2]").splitlines()[0] == "Result of t: 2 entries"
        assert format_observation("t", "null") == "Result of t: null"


class TestNotesOnResults:
    """The agent appends notes to a stored result (served from the cache, seen before this
    turn); the model must still get the rendered view, with the notes after it."""

    ORDER = json.dumps({"order_id": "#W1", "user_id": "u1", "status": "pending"})

    def test_cache_and_repeat_notes_survive_rendering(self) -> None:
        plain = format_observation("get_order_details", self.ORDER)
        for notes in (REPEAT_HINT, CACHED_NOTE, CACHED_NOTE + REPEAT_HINT):
            message = ToolMessage(self.ORDER + notes, tool_call_id="c1", name="get_order_details")
            [shown] = formatted([message])
            assert shown.content == plain + notes
            assert not str(shown.content).startswith("{")
