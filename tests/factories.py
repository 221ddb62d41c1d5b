"""Test data builders: domain values with sensible defaults, and SQL inserts for them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.domain.models import (
    Address,
    Customer,
    Fulfillment,
    Order,
    OrderItem,
    OrderStatus,
    PaymentMethod,
    Product,
    Transaction,
    Variant,
)
from app.identity import AgentContext, Role

HOME = Address("1 Elm St", "Apt 2", "Austin", "TX", "USA", "78701")


def credit_card(id: str = "credit_card_1111111", last_four: str = "9212") -> PaymentMethod:
    return PaymentMethod(id=id, source="credit_card", brand="visa", last_four=last_four)


def gift_card(id: str = "gift_card_2222222", balance: str = "100.00") -> PaymentMethod:
    return PaymentMethod(id=id, source="gift_card", balance=Decimal(balance))


def paypal(id: str = "paypal_3333333") -> PaymentMethod:
    return PaymentMethod(id=id, source="paypal")


def customer(
    id: str = "sara_doe_496",
    *,
    first_name: str = "Sara",
    last_name: str = "Doe",
    email: str = "sara.doe@example.com",
    address: Address = HOME,
    payment_methods: tuple[PaymentMethod, ...] | None = None,
    order_ids: tuple[str, ...] = (),
) -> Customer:
    if payment_methods is None:
        payment_methods = (credit_card(), gift_card(), paypal())
    return Customer(id, first_name, last_name, email, address, payment_methods, order_ids)


def variant(
    item_id: str, product_id: str = "8310926033", price: str = "50.00", **options: Any
) -> Variant:
    return Variant(
        item_id=item_id,
        product_id=product_id,
        options=options or {"color": "red"},
        price=Decimal(price),
        available=True,
    )


def bottle(*, unavailable: tuple[str, ...] = ()) -> Product:
    """A product with four variants: 1000 (50.00), 2000 (60.00), 3000 (45.50), 4000 (80.00)."""
    prices = {"1000": "50.00", "2000": "60.00", "3000": "45.50", "4000": "80.00"}
    variants = tuple(
        Variant(
            item_id=item_id,
            product_id="8310926033",
            options={"capacity": f"{item_id}ml"},
            price=Decimal(price),
            available=item_id not in unavailable,
        )
        for item_id, price in prices.items()
    )
    return Product(id="8310926033", name="Water Bottle", variants=variants)


def lamp() -> Product:
    return Product(
        id="6817146515",
        name="Desk Lamp",
        variants=(
            Variant("5000", "6817146515", {"color": "black"}, Decimal("30.00"), True),
            Variant("6000", "6817146515", {"color": "white"}, Decimal("35.00"), True),
        ),
    )


def item_of(product: Product, item_id: str) -> OrderItem:
    v = next(v for v in product.variants if v.item_id == item_id)
    return OrderItem(product.id, v.item_id, product.name, v.price, dict(v.options))


def order(
    id: str = "#W0000001",
    *,
    customer_id: str = "sara_doe_496",
    status: OrderStatus = "pending",
    items: tuple[OrderItem, ...] | None = None,
    payments: tuple[Transaction, ...] | None = None,
    paid_with: str = "credit_card_1111111",
    address: Address = HOME,
) -> Order:
    """Defaults: two bottles (1000, 2000) and a lamp (5000), paid in full with `paid_with`."""
    if items is None:
        b, lp = bottle(), lamp()
        items = (item_of(b, "1000"), item_of(b, "2000"), item_of(lp, "5000"))
    if payments is None:
        payments = (Transaction("payment", sum((i.price for i in items), Decimal(0)), paid_with),)
    fulfillments: tuple[Fulfillment, ...] = ()
    if status not in ("pending", "cancelled"):
        fulfillments = (Fulfillment(("123456789",), tuple(i.item_id for i in items)),)
    return Order(
        id=id,
        customer_id=customer_id,
        address=address,
        status=status,
        items=items,
        fulfillments=fulfillments,
        payment_history=payments,
    )


# --- SQL inserts -------------------------------------------------------------------------


async def insert_customer(conn: AsyncConnection[Any], c: Customer) -> None:
    a = c.address
    await conn.execute(
        "INSERT INTO customers (id, first_name, last_name, email, address1, address2, city,"
        " state, country, zip) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (c.id, c.first_name, c.last_name, c.email, a.address1, a.address2, a.city, a.state,
         a.country, a.zip),
    )  # fmt: skip
    for position, m in enumerate(c.payment_methods):
        await conn.execute(
            "INSERT INTO payment_methods (id, customer_id, source, brand, last_four, balance,"
            " position) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (m.id, c.id, m.source, m.brand, m.last_four, m.balance, position),
        )


async def insert_product(conn: AsyncConnection[Any], p: Product) -> None:
    await conn.execute("INSERT INTO products (id, name) VALUES (%s, %s)", (p.id, p.name))
    for position, v in enumerate(p.variants):
        await conn.execute(
            "INSERT INTO variants (item_id, product_id, options, price, available, position)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (v.item_id, p.id, Jsonb(v.options), v.price, v.available, position),
        )


async def insert_order(conn: AsyncConnection[Any], o: Order, position: int = 0) -> None:
    a = o.address
    await conn.execute(
        "INSERT INTO orders (id, customer_id, position, address1, address2, city, state,"
        " country, zip, status) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (o.id, o.customer_id, position, a.address1, a.address2, a.city, a.state, a.country,
         a.zip, o.status),
    )  # fmt: skip
    for i, item in enumerate(o.items):
        await conn.execute(
            "INSERT INTO order_items (order_id, position, product_id, item_id, name, price,"
            " options) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (o.id, i, item.product_id, item.item_id, item.name, item.price, Jsonb(item.options)),
        )
    for i, f in enumerate(o.fulfillments):
        await conn.execute(
            "INSERT INTO fulfillments (order_id, position, tracking_ids, item_ids)"
            " VALUES (%s, %s, %s, %s)",
            (o.id, i, Jsonb(list(f.tracking_ids)), Jsonb(list(f.item_ids))),
        )
    for i, t in enumerate(o.payment_history):
        await conn.execute(
            "INSERT INTO payment_transactions (order_id, position, transaction_type, amount,"
            " payment_method_id) VALUES (%s, %s, %s, %s, %s)",
            (o.id, i, t.transaction_type, t.amount, t.payment_method_id),
        )


async def seed(
    pool: AsyncConnectionPool[Any],
    customers: tuple[Customer, ...] = (),
    products: tuple[Product, ...] = (),
    orders: tuple[Order, ...] = (),
) -> None:
    """Insert everything in one transaction; orders keep their tuple position per customer."""
    async with pool.connection() as conn, conn.transaction():
        for c in customers:
            await insert_customer(conn, c)
        for p in products:
            await insert_product(conn, p)
        positions: dict[str, int] = {}
        for o in orders:
            position = positions.get(o.customer_id, 0)
            positions[o.customer_id] = position + 1
            await insert_order(conn, o, position)


# --- invoking tools as LangGraph's ToolNode does -------------------------------------------

SHOP_TABLES = (
    "customers",
    "payment_methods",
    "orders",
    "order_items",
    "fulfillments",
    "payment_transactions",
    "handoff_tickets",
)


def tool_runtime(
    *,
    user_id: str = "guest_1",
    role: Role = "guest",
    session: str = "s1",
    verified: str | None = None,
    turn_id: str | None = "turn_1",
    call_id: str = "call_1",
    messages: list[Any] | None = None,
) -> ToolRuntime[AgentContext, Any]:
    state: dict[str, Any] = {"messages": messages or [], "verified_user_id": verified}
    if turn_id is not None:
        state["turn_id"] = turn_id
    return ToolRuntime(
        state=state,
        context=AgentContext(user_id=user_id, role=role, thread_id=f"{user_id}:{session}"),
        config={},
        stream_writer=lambda _: None,
        tool_call_id=call_id,
        store=None,
    )


async def invoke(tool: BaseTool, args: dict[str, Any], runtime: ToolRuntime[Any, Any]) -> Any:
    """Call `tool` with a ToolCall, runtime injected: returns a ToolMessage or a Command."""
    call_id = runtime.tool_call_id or "call_1"
    return await tool.ainvoke(
        {
            "type": "tool_call",
            "id": call_id,
            "name": tool.name,
            "args": {**args, "runtime": runtime},
        }
    )


def text_of(result: Any) -> str:
    """The observation the model would read, from a ToolMessage or a Command."""
    if isinstance(result, Command):
        update = result.update if isinstance(result.update, dict) else {}
        return str(update["messages"][0].content)
    return str(result.content)


async def snapshot(pool: AsyncConnectionPool[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the shop tables, for asserting that nothing changed."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with pool.connection() as conn:
        for table in SHOP_TABLES:
            cursor = await conn.execute(f"SELECT * FROM {table}")
            rows = await cursor.fetchall()
            out[table] = sorted(
                tuple(str(v) for k, v in r.items() if k != "updated_at") for r in rows
            )
    return out


async def rows(pool: AsyncConnectionPool[Any], sql: str, *params: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cursor = await conn.execute(sql, params)
        return list(await cursor.fetchall())
