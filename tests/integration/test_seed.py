from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from app.db.seed import database_is_empty, demo_customers, generate, seed
from app.db.transfer import DataNotEmpty, TauData, export_data
from app.domain.models import ORDER_STATUSES
from tests.integration.test_transfer import as_json

SHIPPED = {"processed", "delivered", "return requested", "exchange requested"}


@pytest.fixture(scope="module")
def shop() -> TauData:
    return generate()


def total(entries: list[dict[str, Any]], key: str = "price") -> Decimal:
    return sum((Decimal(e[key]) for e in entries), Decimal(0))


def paid(order: dict[str, Any], kind: str) -> Decimal:
    return total([t for t in order["payment_history"] if t["transaction_type"] == kind], "amount")


class TestGeneratedShop:
    def test_has_the_promised_size(self, shop: TauData) -> None:
        assert len(shop.users) >= 200
        assert len(shop.products) == 50
        assert len(shop.orders) == 1000
        assert all(5 <= len(p["variants"]) <= 20 for p in shop.products.values())

    def test_every_status_appears_many_times(self, shop: TauData) -> None:
        counts = Counter(o["status"] for o in shop.orders.values())
        assert set(counts) == set(ORDER_STATUSES)
        assert min(counts.values()) >= 30

    def test_same_seed_gives_equal_data_and_another_seed_does_not(self, shop: TauData) -> None:
        assert generate() == shop
        assert generate(seed=7) != shop

    def test_payments_add_up_to_the_items(self, shop: TauData) -> None:
        for order in shop.orders.values():
            items = total(order["items"])
            if order["status"] == "cancelled":
                assert paid(order, "payment") == items == paid(order, "refund"), order["order_id"]
            else:
                assert paid(order, "payment") - paid(order, "refund") == items, order["order_id"]

    def test_payments_use_the_customers_own_methods(self, shop: TauData) -> None:
        for order in shop.orders.values():
            methods = shop.users[order["user_id"]]["payment_methods"]
            used = {t["payment_method_id"] for t in order["payment_history"]}
            assert used <= set(methods), order["order_id"]

    def test_shipped_orders_have_tracking_for_every_item(self, shop: TauData) -> None:
        for order in shop.orders.values():
            shipped = [i for f in order["fulfillments"] for i in f["item_ids"]]
            if order["status"] in SHIPPED:
                assert sorted(shipped) == sorted(i["item_id"] for i in order["items"])
                assert all(
                    re.fullmatch(r"\d{12}", t)
                    for f in order["fulfillments"]
                    for t in f["tracking_id"]
                )
            else:
                assert shipped == [], order["order_id"]

    def test_some_orders_ship_in_several_parcels(self, shop: TauData) -> None:
        split = [o for o in shop.orders.values() if len(o["fulfillments"]) > 1]
        assert len(split) >= 20

    def test_status_fields_are_set_where_they_belong(self, shop: TauData) -> None:
        prices = {i: v["price"] for p in shop.products.values() for i, v in p["variants"].items()}
        for order in shop.orders.values():
            status = order["status"]
            item_ids = {i["item_id"] for i in order["items"]}
            assert ("cancel_reason" in order) == (status == "cancelled")
            assert ("return_items" in order) == (status == "return requested")
            assert ("exchange_items" in order) == (status == "exchange requested")
            if status == "return requested":
                assert set(order["return_items"]) <= item_ids
            if status == "exchange requested":
                new = [prices[i] for i in order["exchange_new_items"]]
                old = [prices[i] for i in order["exchange_items"]]
                assert set(order["exchange_items"]) <= item_ids
                assert order["exchange_price_difference"] == sum(new) - sum(old)

    def test_catalog_has_unavailable_variants_and_gift_cards_have_balances(
        self, shop: TauData
    ) -> None:
        variants = [v for p in shop.products.values() for v in p["variants"].values()]
        assert 0 < sum(not v["available"] for v in variants) < len(variants) / 2
        methods = [m for u in shop.users.values() for m in u["payment_methods"].values()]
        gift_cards = [m for m in methods if m["source"] == "gift_card"]
        assert len(gift_cards) >= 20
        assert all(m["balance"] >= 0 for m in gift_cards)
        assert {m["source"] for m in methods} == {"credit_card", "gift_card", "paypal"}

    def test_ids_and_contact_details_look_like_tau_bench(self, shop: TauData) -> None:
        for user_id, user in shop.users.items():
            first, last = (user["name"][k].lower() for k in ("first_name", "last_name"))
            assert re.fullmatch(rf"{first}_{last}_\d{{4}}", user_id)
            assert re.fullmatch(rf"{first}\.{last}\d+@example\.com", user["email"])
            assert re.fullmatch(r"\d{5}", user["address"]["zip"])
            for method_id in user["payment_methods"]:
                assert re.fullmatch(r"(credit_card|gift_card|paypal)_\d{7}", method_id)
        assert all(re.fullmatch(r"#W\d{7}", order_id) for order_id in shop.orders)
        item_ids = [i for p in shop.products.values() for i in p["variants"]]
        assert all(re.fullmatch(r"\d{10}", i) for i in [*shop.products, *item_ids])
        names = Counter(
            (u["name"]["first_name"], u["name"]["last_name"]) for u in shop.users.values()
        )
        assert len(names) == len(shop.users)


class TestSeed:
    async def test_seed_fills_an_empty_database(self, db: AsyncConnectionPool[Any]) -> None:
        assert await database_is_empty(db)
        summary = await seed(db)
        assert not await database_is_empty(db)
        assert (summary.customers, summary.products, summary.orders) == (200, 50, 1000)
        assert sum(summary.orders_by_status.values()) == 1000
        assert set(summary.orders_by_status) == set(ORDER_STATUSES)

    async def test_seeded_shop_exports_back_unchanged(
        self, db: AsyncConnectionPool[Any], shop: TauData
    ) -> None:
        await seed(db)
        assert as_json(await export_data(db)) == as_json(shop)

    async def test_seed_refuses_a_non_empty_database_unless_replacing(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async with db.connection() as conn:
            await conn.execute("INSERT INTO products (id, name) VALUES ('1234567890', 'Lamp')")
        with pytest.raises(DataNotEmpty):
            await seed(db)
        await seed(db, replace=True)
        async with db.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM products WHERE id = '1234567890'")
            assert await cur.fetchone() == {"n": 0}

    async def test_demo_customers_have_orders_in_several_statuses(
        self, db: AsyncConnectionPool[Any], shop: TauData
    ) -> None:
        await seed(db)
        demo = await demo_customers(db, n=5)
        assert len({c.user_id for c in demo}) == 5
        for customer in demo:
            user = shop.users[customer.user_id]
            assert customer.name == f"{user['name']['first_name']} {user['name']['last_name']}"
            assert customer.email == user["email"]
            statuses = {shop.orders[o]["status"] for o in user["orders"]}
            assert len(statuses) >= 3

    async def test_empty_database_has_no_demo_customers(self, db: AsyncConnectionPool[Any]) -> None:
        assert await demo_customers(db) == []
