"""Read the shop tables back into the tau-bench objects, from one snapshot."""

from __future__ import annotations

from typing import Any, cast

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.db.transfer.data import ORDER_OPTIONAL, Json, TauData


async def export_data(pool: AsyncConnectionPool[Any]) -> TauData:
    """Read the shop tables from one consistent snapshot. Money comes back as `Decimal`."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

        async def rows(sql: str) -> list[Json]:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql)
                return cast(list[Json], await cur.fetchall())

        customers = await rows("SELECT * FROM customers ORDER BY id")
        methods = await rows("SELECT * FROM payment_methods ORDER BY customer_id, position, id")
        products = await rows("SELECT * FROM products ORDER BY id")
        variants = await rows("SELECT * FROM variants ORDER BY product_id, position, item_id")
        orders = await rows("SELECT * FROM orders ORDER BY id")
        items = await rows("SELECT * FROM order_items ORDER BY order_id, position")
        fulfillments = await rows("SELECT * FROM fulfillments ORDER BY order_id, position")
        payments = await rows("SELECT * FROM payment_transactions ORDER BY order_id, position")

    data = TauData()
    for c in customers:
        data.users[c["id"]] = {
            "name": {"first_name": c["first_name"], "last_name": c["last_name"]},
            "address": _address_json(c),
            "email": c["email"],
            "payment_methods": {},
            "orders": [],
        }
    for m in methods:
        method: Json = {"source": m["source"]}
        for key in ("brand", "last_four", "balance"):
            if m[key] is not None:
                method[key] = m[key]
        method["id"] = m["id"]
        data.users[m["customer_id"]]["payment_methods"][m["id"]] = method
    for p in products:
        data.products[p["id"]] = {"name": p["name"], "product_id": p["id"], "variants": {}}
    for v in variants:
        data.products[v["product_id"]]["variants"][v["item_id"]] = {
            "item_id": v["item_id"],
            "options": v["options"],
            "available": v["available"],
            "price": v["price"],
        }
    for o in sorted(orders, key=lambda o: (o["customer_id"], o["position"], o["id"])):
        data.users[o["customer_id"]]["orders"].append(o["id"])
    for o in orders:
        order: Json = {
            "order_id": o["id"],
            "user_id": o["customer_id"],
            "address": _address_json(o),
            "items": [],
            "fulfillments": [],
            "status": o["status"],
            "payment_history": [],
        }
        order.update({k: o[k] for k in ORDER_OPTIONAL if o[k] is not None})
        data.orders[o["id"]] = order
    for it in items:
        data.orders[it["order_id"]]["items"].append(
            {k: it[k] for k in ("name", "product_id", "item_id", "price", "options")}
        )
    for f in fulfillments:
        data.orders[f["order_id"]]["fulfillments"].append(
            {"tracking_id": f["tracking_ids"], "item_ids": f["item_ids"]}
        )
    for t in payments:
        data.orders[t["order_id"]]["payment_history"].append(
            {k: t[k] for k in ("transaction_type", "amount", "payment_method_id")}
        )
    return data


def _address_json(row: Json) -> Json:
    return {k: row[k] for k in ("address1", "address2", "city", "country", "state", "zip")}
