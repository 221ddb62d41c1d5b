"""The shop a run loads, and the records each recorded task starts from.

A recorded task carries its own records (`data`: its customer, their orders, the products
it touched) as they were when its conversation started. The run's shop holds every task's
records: those of the shop the eval would load otherwise (`--data`, or the seed shop) when
some task carries none, plus each recorded record that shop lacks (the first task's version).
Before a recorded task's trial, its worker's copy is set to the task's own versions
(`start_data`, read as rows by app/eval/gold.py), so two conversations of one customer each
replay from their own start.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from app.db.transfer import TauData
from app.eval.tasks import Task


def needs_shop(tasks: Sequence[Task]) -> bool:
    """Whether some task runs on the shop the eval loads (it carries no records of its own)."""
    return any(t.data is None for t in tasks)


def run_data(tasks: Sequence[Task], shop: TauData | None) -> TauData:
    """`shop` (or nothing), with every recorded record it lacks."""
    out = copy.deepcopy(shop) if shop is not None else TauData()
    for task in tasks:
        if task.data is None:
            continue
        users = task.data.get("users", {})
        for user_id, user in users.items():
            if user_id in out.users:
                continue
            out.users[user_id] = copy.deepcopy(user)
            for order_id in user.get("orders", []):
                out.orders[order_id] = copy.deepcopy(task.data["orders"][order_id])
        for product_id, product in task.data.get("products", {}).items():
            out.products.setdefault(product_id, copy.deepcopy(product))
    return out


def start_data(base: TauData, task: Task) -> TauData | None:
    """The run's shop with the task's records in place of the shop's; None when the task
    carries none."""
    if task.data is None:
        return None
    return overlay(base, task.data)


def overlay(base: TauData, records: dict[str, Any]) -> TauData:
    """`base` with `records` (tau-bench users, orders, products) put over it. A user's
    orders are the ones their record lists; an order `records` lacks stays as in `base`."""
    out = TauData(users=dict(base.users), products=dict(base.products), orders=dict(base.orders))
    for user_id, user in records.get("users", {}).items():
        listed = set(user.get("orders", []))
        for order_id in out.users.get(user_id, {}).get("orders", []):
            if order_id not in listed:
                out.orders.pop(order_id, None)
        out.users[user_id] = user
    out.orders.update(records.get("orders", {}))
    out.products.update(records.get("products", {}))
    return out
