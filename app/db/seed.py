"""A believable demo shop, generated from a fixed seed and loaded through the tau-bench import.

The same seed always gives the same shop (no clock, no global random state), so demos, tests
and benchmarks can name customers and orders that will be there.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any, NamedTuple

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.db.transfer import Json, TauData, import_data
from app.domain.models import ORDER_STATUSES

DEFAULT_SEED = 20240611
CUSTOMERS = 200
ORDERS = 1000

_FIRST_NAMES = """
Noah Emma Liam Olivia Ava Ethan Sophia Mason Isabella Lucas Mia Aiden Amelia Yusuf Fatima
Omar Aisha Mei Wei Hiroshi Yuki Priya Arjun Ananya Rohan Sofia Mateo Valentina Diego
Camila Santiago Lucia Chloe Daniel Grace James Harper Benjamin Ella Elijah Zoe Chen Lin
Kwame Amara Chidi Ngozi Anders Ingrid Lars Freya Pierre Amelie Giulia Marco Ivan Daria Raj
Sara Juan Maria Ahmed Leila Tomas Anna Kenji Hana Malik Imani Connor Siobhan Ravi
"""
_LAST_NAMES = """
Brown Smith Johnson Garcia Martinez Lopez Rossi Kim Nguyen Patel Shah Chen Wang Li Tanaka
Sato Khan Ahmed Hassan Ali Okafor Mensah Adeyemi Silva Santos Costa Hernandez Gonzalez
Moreno Muller Schmidt Fischer Larsen Johansson Novak Kowalski Ivanova Dubois Moreau
Bianchi Ricci Anderson Thomas Jackson White Harris Clark Lewis Walker Young Allen Wright
Scott Green Baker Adams Nelson Carter Mitchell Roberts Turner Phillips Campbell Parker
Evans Edwards Collins Stewart Murphy Cook Rogers Reed Bailey Bell Cooper Rivera Sullivan
Kaur
"""
_STREETS = """
Maple Drive, Oak Street, Pine Lane, Cedar Avenue, Elm Street, Sunset Drive, River Road,
Lakeview Drive, Hillcrest Avenue, Park Avenue, Main Street, Broadway, Highland Avenue,
Willow Lane, Chestnut Street, Spruce Street, Laurel Lane, Washington Street,
Lincoln Avenue, Jefferson Road, Cherry Street, Walnut Street, Meadow Lane, Forest Drive,
Ridge Road, Harbor View Court, Mill Creek Road
"""
FIRST_NAMES = tuple(_FIRST_NAMES.split())
LAST_NAMES = tuple(_LAST_NAMES.split())
STREETS = tuple(s.strip() for s in _STREETS.split(","))
# (city, state, first three digits of its zip codes)
CITIES = (
    ("New York", "NY", "100"), ("Los Angeles", "CA", "900"), ("Chicago", "IL", "606"),
    ("Houston", "TX", "770"), ("Phoenix", "AZ", "850"), ("Philadelphia", "PA", "191"),
    ("San Antonio", "TX", "782"), ("San Diego", "CA", "921"), ("Dallas", "TX", "752"),
    ("Austin", "TX", "787"), ("Jacksonville", "FL", "322"), ("Columbus", "OH", "432"),
    ("Charlotte", "NC", "282"), ("Indianapolis", "IN", "462"), ("Seattle", "WA", "981"),
    ("Denver", "CO", "802"), ("Boston", "MA", "021"), ("Nashville", "TN", "372"),
    ("Portland", "OR", "972"), ("Las Vegas", "NV", "891"), ("Detroit", "MI", "482"),
    ("Minneapolis", "MN", "554"), ("Atlanta", "GA", "303"), ("Miami", "FL", "331"),
    ("Raleigh", "NC", "276"), ("Salt Lake City", "UT", "841"), ("Kansas City", "MO", "641"),
    ("Milwaukee", "WI", "532"), ("Albuquerque", "NM", "871"), ("Pittsburgh", "PA", "152"),
    ("Baltimore", "MD", "212"), ("Sacramento", "CA", "958"), ("Tucson", "AZ", "857"),
    ("Madison", "WI", "537"), ("Richmond", "VA", "232"),
)  # fmt: skip
CARD_BRANDS = ("visa", "visa", "mastercard", "mastercard", "amex", "discover")
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
STATUS_WEIGHTS = {
    "pending": 24,
    "processed": 14,
    "delivered": 34,
    "cancelled": 10,
    "pending (item modified)": 6,
    "return requested": 6,
    "exchange requested": 6,
}

# A product, its price range in dollars, then one line per option. Later values of an option
# (more storage, a bigger size) cost more; colours cost the same.
# The products the demo shop sells: a name, a price range in dollars and each option's
# values (app/db/catalog.json, shipped as package data).
CatalogEntry = tuple[str, int, int, dict[str, list[str]]]


@functools.cache
def catalog() -> tuple[CatalogEntry, ...]:
    text = resources.files("app.db").joinpath("catalog.json").read_text(encoding="utf-8")
    return tuple(
        (entry["name"], *entry["price_range"], entry["options"]) for entry in json.loads(text)
    )


@dataclass(frozen=True)
class SeedSummary:
    customers: int
    products: int
    variants: int
    orders: int
    orders_by_status: dict[str, int]


class DemoCustomer(NamedTuple):
    user_id: str
    name: str
    email: str


class _Ids:
    """Random numeric ids, never the same one twice within a shop."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def new(self, prefix: str, digits: int) -> str:
        while True:
            value = prefix + str(self.rng.randrange(10 ** (digits - 1), 10**digits))
            if value not in self.used:
                self.used.add(value)
                return value


def generate(
    seed: int = DEFAULT_SEED, *, customers: int = CUSTOMERS, orders: int = ORDERS
) -> TauData:
    """The demo shop for `seed`: the same seed always gives equal data."""
    rng = random.Random(seed)
    ids = _Ids(rng)
    data = TauData()
    for product in _products(rng, ids):
        data.products[product["product_id"]] = product
    for user_id, user in _users(rng, ids, customers):
        data.users[user_id] = user
    _orders(rng, ids, data, orders)
    return data


def _address(rng: random.Random) -> Json:
    city, state, zip3 = rng.choice(CITIES)
    unit = rng.choice(("", "", f"Apt {rng.randint(1, 40)}", f"Suite {rng.randint(100, 999)}"))
    return {
        "address1": f"{rng.randint(100, 9999)} {rng.choice(STREETS)}",
        "address2": unit,
        "city": city,
        "country": "USA",
        "state": state,
        "zip": f"{zip3}{rng.randint(1, 99):02d}",
    }


def _rank(options: dict[str, list[str]], combo: tuple[tuple[int, str], ...]) -> float:
    """0 for the plainest variant, 1 for the dearest. Colours do not change the price."""
    steps = [
        i / (len(values) - 1)
        for (key, values), (i, _) in zip(options.items(), combo, strict=True)
        if "color" not in key and len(values) > 1
    ]
    return sum(steps) / len(steps) if steps else 0.5


def _products(rng: random.Random, ids: _Ids) -> list[Json]:
    products = []
    for name, low, high, options in catalog():
        axes = [list(enumerate(values)) for values in options.values()]
        combos = list(itertools.product(*axes))
        chosen = sorted(rng.sample(combos, rng.randint(5, min(20, len(combos)))))
        variants: dict[str, Json] = {}
        for combo in chosen:
            raw = low + (high - low) * (0.75 * _rank(options, combo) + 0.25 * rng.random())
            cents = rng.choice(("0.99", "0.99", "0.95", "0.49", "0.00"))
            item_id = ids.new("", 10)
            variants[item_id] = {
                "item_id": item_id,
                "options": {key: value for key, (_, value) in zip(options, combo, strict=True)},
                "available": rng.random() > 0.2,
                "price": Decimal(int(raw)) + Decimal(cents),
            }
        if not any(v["available"] for v in variants.values()):
            next(iter(variants.values()))["available"] = True
        product_id = ids.new("", 10)
        products.append({"name": name, "product_id": product_id, "variants": variants})
    return products


def _users(rng: random.Random, ids: _Ids, count: int) -> list[tuple[str, Json]]:
    users = []
    for first, last in rng.sample(list(itertools.product(FIRST_NAMES, LAST_NAMES)), count):
        slug_first, slug_last = (re.sub(r"[^a-z]", "", n.lower()) for n in (first, last))
        user_id = ids.new(f"{slug_first}_{slug_last}_", 4)
        methods: dict[str, Json] = {}
        sources = rng.sample(
            ("credit_card", "credit_card", "gift_card", "paypal"), rng.randint(1, 3)
        )
        for source in sources:
            method_id = ids.new(f"{source}_", 7)
            method: Json = {"source": source}
            if source == "credit_card":
                method["brand"] = rng.choice(CARD_BRANDS)
                method["last_four"] = f"{rng.randint(0, 9999):04d}"
            elif source == "gift_card":
                method["balance"] = (
                    Decimal(rng.randint(0, 300)) + Decimal(rng.choice((0, 0, 25, 50, 99))) / 100
                )
            methods[method_id] = method | {"id": method_id}
        users.append(
            (
                user_id,
                {
                    "name": {"first_name": first, "last_name": last},
                    "address": _address(rng),
                    "email": f"{slug_first}.{slug_last}{rng.randint(1000, 9999)}@example.com",
                    "payment_methods": methods,
                    "orders": [],
                },
            )
        )
    return users


def _orders(rng: random.Random, ids: _Ids, data: TauData, count: int) -> None:
    user_ids = list(data.users)
    weights = [rng.uniform(0.2, 3.0) for _ in user_ids]
    owners = user_ids[:count] + rng.choices(user_ids, weights, k=max(0, count - len(user_ids)))
    rng.shuffle(owners)
    kinds = list(STATUS_WEIGHTS)
    statuses: list[str] = [*ORDER_STATUSES]
    statuses += rng.choices(kinds, [STATUS_WEIGHTS[k] for k in kinds], k=max(0, count - 7))
    rng.shuffle(statuses)
    catalog = [(p, v) for p in data.products.values() for v in p["variants"].values()]
    for owner, status in zip(owners, statuses[:count], strict=False):
        user = data.users[owner]
        order_id = ids.new("#W", 7)
        picks = rng.sample(catalog, rng.choices((1, 2, 3, 4, 5), (35, 30, 18, 10, 7))[0])
        order = _order(rng, ids, order_id, owner, user, picks, status)
        data.orders[order_id] = order
        user["orders"].append(order_id)


def _item(product: Json, variant: Json) -> Json:
    return {
        "name": product["name"],
        "product_id": product["product_id"],
        "item_id": variant["item_id"],
        "price": variant["price"],
        "options": dict(variant["options"]),
    }


def _other_variant(rng: random.Random, product: Json, item_id: str) -> Json:
    others = [v for v in product["variants"].values() if v["item_id"] != item_id]
    return rng.choice([v for v in others if v["available"]] or others)


def _order(
    rng: random.Random,
    ids: _Ids,
    order_id: str,
    user_id: str,
    user: Json,
    picks: list[tuple[Json, Json]],
    status: str,
) -> Json:
    items = [_item(p, v) for p, v in picks]
    methods = list(user["payment_methods"])
    paid_with = rng.choice(methods)
    total = sum((i["price"] for i in items), Decimal(0))
    history: list[Json] = [_transaction("payment", total, paid_with)]
    order: Json = {
        "order_id": order_id,
        "user_id": user_id,
        "address": dict(user["address"]) if rng.random() < 0.9 else _address(rng),
        "items": items,
        "fulfillments": [],
        "status": status,
        "payment_history": history,
    }
    if status in ("processed", "delivered", "return requested", "exchange requested"):
        order["fulfillments"] = _fulfillments(rng, ids, [i["item_id"] for i in items])
    if status == "cancelled":
        history.append(_transaction("refund", total, paid_with))
        order["cancel_reason"] = rng.choice(CANCEL_REASONS)
    elif status == "pending (item modified)":
        index = rng.randrange(len(items))
        product, variant = picks[index]
        new = _other_variant(rng, product, variant["item_id"])
        items[index] = _item(product, new)
        difference = new["price"] - variant["price"]
        if difference:
            kind = "payment" if difference > 0 else "refund"
            history.append(_transaction(kind, abs(difference), rng.choice(methods)))
    elif status == "return requested":
        returned = rng.sample(items, rng.randint(1, len(items)))
        gift_cards = [m for m in methods if m.startswith("gift_card_")]
        order["return_items"] = [i["item_id"] for i in returned]
        order["return_payment_method_id"] = rng.choice([paid_with, *gift_cards])
    elif status == "exchange requested":
        chosen = sorted(rng.sample(range(len(items)), rng.randint(1, len(items))))
        new_items = [_other_variant(rng, picks[i][0], items[i]["item_id"]) for i in chosen]
        order["exchange_items"] = [items[i]["item_id"] for i in chosen]
        order["exchange_new_items"] = [v["item_id"] for v in new_items]
        order["exchange_payment_method_id"] = rng.choice(methods)
        order["exchange_price_difference"] = sum((v["price"] for v in new_items), Decimal(0)) - sum(
            (items[i]["price"] for i in chosen), Decimal(0)
        )
    return order


def _transaction(kind: str, amount: Decimal, method_id: str) -> Json:
    return {"transaction_type": kind, "amount": amount, "payment_method_id": method_id}


def _fulfillments(rng: random.Random, ids: _Ids, item_ids: list[str]) -> list[Json]:
    """One shipment, or (for some larger orders) two, each with its tracking number."""
    if len(item_ids) >= 2 and rng.random() < 0.3:
        cut = rng.randint(1, len(item_ids) - 1)
        groups = [item_ids[:cut], item_ids[cut:]]
    else:
        groups = [item_ids]
    return [{"tracking_id": [ids.new("", 12)], "item_ids": list(g)} for g in groups]


# ---------------------------------------------------------------------------- database


async def seed(pool: AsyncConnectionPool[Any], *, replace: bool = False) -> SeedSummary:
    """Load the demo shop. Refuses a database holding shop data unless `replace`."""
    data = generate()
    result = await import_data(pool, data, replace=replace)
    by_status = Counter(o["status"] for o in data.orders.values())
    return SeedSummary(
        customers=result.customers,
        products=result.products,
        variants=result.variants,
        orders=result.orders,
        orders_by_status={s: by_status[s] for s in ORDER_STATUSES},
    )


async def database_is_empty(pool: AsyncConnectionPool[Any]) -> bool:
    """No customers, products or orders (the ledger and audit tables do not count)."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT NOT (EXISTS (SELECT 1 FROM customers) OR EXISTS (SELECT 1 FROM products)"
            " OR EXISTS (SELECT 1 FROM orders)) AS empty"
        )
        row = await cur.fetchone()
    return bool(row and row["empty"])


async def demo_customers(pool: AsyncConnectionPool[Any], n: int = 5) -> list[DemoCustomer]:
    """Customers worth signing in as: those whose orders span the most statuses first."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """
            SELECT c.id, c.first_name || ' ' || c.last_name AS name, c.email
            FROM customers c LEFT JOIN orders o ON o.customer_id = c.id
            GROUP BY c.id
            ORDER BY count(DISTINCT o.status) DESC, count(o.id) DESC, c.id
            LIMIT %s
            """,
            (n,),
        )
        rows = await cur.fetchall()
    return [DemoCustomer(r["id"], r["name"], r["email"]) for r in rows]
