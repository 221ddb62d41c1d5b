"""What the recorder reads from the service's database: which conversations, their runs,
their writes with before-images, the customer's records now, and the products they touch.

Read-only, in one REPEATABLE READ transaction per conversation (the caller's), so the
records now and the audit rows after them are one consistent picture.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql

from app.eval.rebuild import AuditRow, Groups
from app.identity import GUEST_PREFIX

_SINCE = """SELECT t.thread_id FROM threads t
    LEFT JOIN conversation_outcomes o ON o.thread_id = t.thread_id
    WHERE t.created_at >= now() - make_interval(secs => %(since_s)s)
      AND EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id)
      AND (%(flag)s::text IS NULL
           OR o.flags @> jsonb_build_array(jsonb_build_object('code', %(flag)s::text)))
      AND (%(result)s::text IS NULL OR o.result = %(result)s)
    ORDER BY t.created_at, t.thread_id"""
_AUDIT = """SELECT id, thread_id, customer_id, tool_name, arguments, ok, before_image
    FROM audit_log"""


@dataclass
class Conversation:
    thread_id: str
    user_id: str  # the token's subject: the customer, or a guest
    started_at: datetime
    runs: list[dict[str, Any]] = field(default_factory=list)  # each run's result, in order
    writes: list[AuditRow] = field(default_factory=list)  # this thread's, in order
    handoff_tickets: int = 0
    control: str = "agent"
    result: str | None = None  # the analytics outcome, when computed

    @property
    def customer_id(self) -> str | None:
        """Whose records: the signed-in customer, or the one a guest proved to be."""
        if not self.user_id.startswith(GUEST_PREFIX):
            return self.user_id
        return next((w.customer_id for w in self.writes if w.customer_id), None)


async def select_threads(
    conn: AsyncConnection[Any], *, since_s: float, flag: str | None, result: str | None
) -> list[str]:
    """Conversations started in the last `since_s` seconds, by flag and result when asked
    (those two need the analytics' outcomes: a conversation without one is left out)."""
    params = {"since_s": since_s, "flag": flag, "result": result}
    rows = await (await conn.execute(_SINCE, params)).fetchall()
    return [str(r["thread_id"]) for r in rows]


async def load_conversation(conn: AsyncConnection[Any], thread_id: str) -> Conversation | None:
    cur = await conn.execute(
        "SELECT user_id, created_at FROM threads WHERE thread_id = %s", (thread_id,)
    )
    thread = await cur.fetchone()
    if thread is None:
        return None
    runs = await (
        await conn.execute(
            "SELECT result, created_at FROM runs WHERE thread_id = %s AND result IS NOT NULL"
            " ORDER BY created_at, run_id",
            (thread_id,),
        )
    ).fetchall()
    started = min([thread["created_at"], *(r["created_at"] for r in runs)])
    writes = await _audit(conn, " WHERE thread_id = %s ORDER BY id", (thread_id,))
    cur = await conn.execute(
        "SELECT (SELECT count(*) FROM handoff_tickets WHERE thread_id = %(t)s) AS tickets,"
        " (SELECT control FROM thread_leases WHERE thread_id = %(t)s) AS control,"
        " (SELECT result FROM conversation_outcomes WHERE thread_id = %(t)s) AS result",
        {"t": thread_id},
    )
    extra = await cur.fetchone() or {}
    return Conversation(
        thread_id=thread_id,
        user_id=str(thread["user_id"]),
        started_at=started,
        runs=[r["result"] for r in runs],
        writes=writes,
        handoff_tickets=int(extra.get("tickets") or 0),
        control=str(extra.get("control") or "agent"),
        result=extra.get("result"),
    )


async def writes_from(
    conn: AsyncConnection[Any], customer_id: str, conversation: Conversation
) -> list[AuditRow]:
    """The customer's writes from the conversation's first one on (any thread's), or, when
    it made none, from its start."""
    if conversation.writes:
        first = conversation.writes[0].id
        return await _audit(
            conn, " WHERE customer_id = %s AND id >= %s ORDER BY id", (customer_id, first)
        )
    return await _audit(
        conn,
        " WHERE customer_id = %s AND created_at >= %s ORDER BY id",
        (customer_id, conversation.started_at),
    )


async def _audit(conn: AsyncConnection[Any], where: str, params: tuple[Any, ...]) -> list[AuditRow]:
    rows = await (await conn.execute(_AUDIT + where, params)).fetchall()
    return [
        AuditRow(
            id=int(r["id"]),
            thread_id=str(r["thread_id"]),
            customer_id=r["customer_id"],
            tool_name=str(r["tool_name"]),
            arguments=dict(r["arguments"] or {}),
            ok=bool(r["ok"]),
            image=r["before_image"],
        )
        for r in rows
    ]


async def current_groups(conn: AsyncConnection[Any], customer_id: str) -> Groups:
    """The customer's records now, in the before-images' groups and row shape."""

    async def rows(query: sql.Composed, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        cur = await conn.execute(query, params)
        return [r["r"] for r in await cur.fetchall()]

    def json_rows(table: str, where: str) -> sql.Composed:
        return sql.SQL("SELECT to_jsonb(t) - 'updated_at' AS r FROM {} t WHERE {}").format(
            sql.Identifier(table), sql.SQL(where)
        )

    customers = await rows(json_rows("customers", "id = %s"), (customer_id,))
    if not customers:
        return {}
    groups: Groups = {
        f"customer:{customer_id}": {
            "customers": customers,
            "payment_methods": await rows(
                json_rows("payment_methods", "customer_id = %s"), (customer_id,)
            ),
        }
    }
    orders = await rows(json_rows("orders", "customer_id = %s"), (customer_id,))
    ids = [o["id"] for o in orders]
    children: dict[str, dict[str, list[dict[str, Any]]]] = {i: {} for i in ids}
    for table in ("order_items", "fulfillments", "payment_transactions"):
        for row in await rows(json_rows(table, "order_id = ANY(%s)"), (ids,)):
            children[row["order_id"]].setdefault(table, []).append(row)
    for order in orders:
        kids = children[order["id"]]
        groups[f"order:{order['id']}"] = {
            "orders": [order],
            "order_items": kids.get("order_items", []),
            "fulfillments": kids.get("fulfillments", []),
            "payment_transactions": kids.get("payment_transactions", []),
        }
    return groups


async def products(
    conn: AsyncConnection[Any],
    product_ids: Iterable[str],
    item_ids: Iterable[str],
    *,
    every: bool = False,
) -> dict[str, Any]:
    """The products (tau-bench's shape) by id, those of the given items, or all of them."""
    cur = await conn.execute(
        "SELECT p.id, p.name, v.item_id, v.options, v.available, v.price FROM products p"
        " JOIN variants v ON v.product_id = p.id"
        " WHERE %(every)s OR p.id = ANY(%(products)s) OR p.id IN"
        " (SELECT product_id FROM variants WHERE item_id = ANY(%(items)s))"
        " ORDER BY p.id, v.position, v.item_id",
        {"every": every, "products": sorted(set(product_ids)), "items": sorted(set(item_ids))},
    )
    out: dict[str, Any] = {}
    for r in await cur.fetchall():
        product = out.setdefault(
            r["id"], {"name": r["name"], "product_id": r["id"], "variants": {}}
        )
        product["variants"][r["item_id"]] = {
            "item_id": r["item_id"],
            "options": r["options"],
            "available": r["available"],
            "price": r["price"],
        }
    return out


def ids_in(values: Sequence[Any], key: str) -> list[str]:
    """Every string under `key` (a string or a list of strings) anywhere in `values`."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == key and isinstance(v, str):
                    found.append(v)
                elif k == key and isinstance(v, list):
                    found.extend(x for x in v if isinstance(x, str))
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(list(values))
    return found
