"""A customer's records as they were at a point in the write audit, and as tau-bench data.

Records come in the groups a write's before-image keeps (app/db/before_images.py):
`customer:<id>` (the customer row and their payment methods) and `order:<id>` (the order
row, its items, fulfillments and payments). A group as it was just before audit row N is the
before-image of the first write at or after N that locked it; a group no later write locked
is as it is now. Pure functions: app/eval/recording.py reads the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.db.before_images import Image
from app.db.transfer import ORDER_OPTIONAL  # the order columns a task's data may leave out

Row = dict[str, Any]
Groups = dict[str, dict[str, list[Row]]]  # group -> table -> rows


@dataclass(frozen=True)
class AuditRow:
    """One write of the audit, as the recorder reads it."""

    id: int
    thread_id: str
    customer_id: str | None
    tool_name: str
    arguments: dict[str, Any]
    ok: bool
    image: Image | None  # None: nothing changed, or not kept (an older row)


class MissingImage(ValueError):
    """A write the rebuild needs kept no before-image (it predates migration 0018)."""


def groups_at(current: Groups, later: Sequence[AuditRow]) -> Groups:
    """The groups as they were before the first of `later` (the customer's writes from that
    point on, in audit order)."""
    out: Groups = {}
    for group, tables in current.items():
        out[group] = _first_image(group, later) or tables
    return out


def groups_after(
    current: Groups, writes: Sequence[AuditRow], thread_id: str
) -> dict[str, dict[str, list[Row]]]:
    """The groups the thread's writes locked, as its last write on each left them: the
    image of the next write to lock the group (any thread's), or the group now."""
    out: Groups = {}
    for group in sorted({g for w in writes if w.thread_id == thread_id for g in w.image or {}}):
        last = max(w.id for w in writes if w.thread_id == thread_id and group in (w.image or {}))
        following = [w for w in writes if w.id > last]
        after = _first_image(group, following) or current.get(group)
        if after is not None:
            out[group] = after
    return out


def check_images(writes: Iterable[AuditRow]) -> None:
    """Refuse a rebuild from writes that changed something and kept no image."""
    for w in writes:
        if w.ok and w.image is None:
            raise MissingImage(
                f"write {w.id} ({w.tool_name}) kept no before-image: it was made before"
                " migration 0018, so the records as they were before it cannot be rebuilt"
            )


def _first_image(group: str, writes: Sequence[AuditRow]) -> dict[str, list[Row]] | None:
    for w in writes:
        if w.image is not None and group in w.image:
            return w.image[group]
    return None


# -- tau-bench data ---------------------------------------------------------------------------


def tau_data(groups: Mapping[str, Mapping[str, list[Row]]]) -> dict[str, dict[str, Any]]:
    """The groups as tau-bench's users and orders (app/db/transfer/ reads this shape). A
    customer's order list holds the orders among the groups, by their position."""
    users: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    order_rows = [t["orders"][0] for g, t in groups.items() if g.startswith("order:")]
    for group, tables in groups.items():
        if group.startswith("customer:"):
            user = user_json(tables["customers"][0], tables.get("payment_methods", []))
            mine = [o for o in order_rows if o["customer_id"] == tables["customers"][0]["id"]]
            user["orders"] = [o["id"] for o in sorted(mine, key=lambda o: (o["position"], o["id"]))]
            users[tables["customers"][0]["id"]] = user
        elif group.startswith("order:"):
            orders[tables["orders"][0]["id"]] = order_json(tables)
    return {"users": users, "orders": orders}


def address_json(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("address1", "address2", "city", "country", "state", "zip")
    return {k: row.get(k) or "" for k in keys}


def user_json(customer: Row, methods: Sequence[Row]) -> dict[str, Any]:
    payment: dict[str, Any] = {}
    for m in sorted(methods, key=lambda m: (m.get("position", 0), m["id"])):
        method: dict[str, Any] = {"source": m["source"]}
        for key in ("brand", "last_four", "balance"):
            if m.get(key) is not None:
                method[key] = m[key]
        method["id"] = m["id"]
        payment[m["id"]] = method
    return {
        "name": {"first_name": customer["first_name"], "last_name": customer["last_name"]},
        "address": address_json(customer),
        "email": customer["email"],
        "payment_methods": payment,
        "orders": [],
    }


def order_json(tables: Mapping[str, Sequence[Row]]) -> dict[str, Any]:
    o = tables["orders"][0]

    def by_position(name: str) -> list[Row]:
        return sorted(tables.get(name, []), key=lambda r: r["position"])

    order: dict[str, Any] = {
        "order_id": o["id"],
        "user_id": o["customer_id"],
        "address": address_json(o),
        "items": [
            {k: i[k] for k in ("name", "product_id", "item_id", "price", "options")}
            for i in by_position("order_items")
        ],
        "fulfillments": [
            {"tracking_id": f["tracking_ids"], "item_ids": f["item_ids"]}
            for f in by_position("fulfillments")
        ],
        "status": o["status"],
        "payment_history": [
            {k: p[k] for k in ("transaction_type", "amount", "payment_method_id")}
            for p in by_position("payment_transactions")
        ],
    }
    order.update({k: o[k] for k in ORDER_OPTIONAL if o.get(k) is not None})
    return order
