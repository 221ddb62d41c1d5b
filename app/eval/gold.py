"""The expected final data of a task: its gold actions applied to the fresh shop by the
project's own write actions and domain rules (app/tools/order_actions.py), inside a
transaction that is rolled back. A gold action our rules refuse makes the task
unsolvable-by-policy: no agent that follows our rules can reach tau-bench's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from app.db.writes import WriteAction
from app.domain.errors import RuleViolation
from app.eval.snapshot import Snapshot, read_snapshot
from app.eval.tasks import Action, Task
from app.tools import order_actions as actions
from app.tools.registry import WRITE_TOOL_NAMES

ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")
# Tools that change nothing tau-bench compares: reads, and the hand-over (a ticket for the
# humans, not shop data). `think` is a tau-bench tool this service does not have.
NO_DATA_CHANGE = frozenset(
    {
        "calculate",
        "calc_shipping",
        "confirm_identity",
        "find_user_id_by_email",
        "find_user_id_by_name_zip",
        "get_order_details",
        "get_order_status",
        "get_product_details",
        "get_user_details",
        "list_all_product_types",
        "search_help_center",
        "get_help_article",
        "remember_preference",
        "think",
        "transfer_to_human_agents",
    }
)


@dataclass(frozen=True)
class Gold:
    snapshot: Snapshot | None  # None when unsolvable
    refused: str | None = None  # why our rules refuse a gold action

    @property
    def solvable(self) -> bool:
        return self.snapshot is not None


async def gold_state(conn: AsyncConnection[Any], task: Task, fresh: Snapshot) -> Gold:
    """On a fresh shop: apply the task's writes as the task's customer, read the result,
    and roll it all back."""
    async with conn.transaction(force_rollback=True):
        for index, action in enumerate(task.actions):
            refused = await _apply(conn, task.user_id, action)
            if refused is not None:
                return Gold(None, f"action {index + 1} {action.name}: {refused}")
        return Gold(await read_snapshot(conn, fresh))


async def _apply(conn: AsyncConnection[Any], customer_id: str, action: Action) -> str | None:
    if action.name in NO_DATA_CHANGE:
        return None
    if action.name not in WRITE_TOOL_NAMES:
        return "this service has no such tool"
    try:
        write = _write_action(customer_id, action.name, action.kwargs)
    except (KeyError, TypeError, ValueError) as error:
        return f"arguments this tool does not take ({type(error).__name__}: {error})"
    try:
        async with conn.transaction():  # a savepoint: a refused rule leaves nothing behind
            await write(conn)
    except RuleViolation as refused:
        return refused.message
    return None


def _write_action(customer_id: str, name: str, kw: Mapping[str, Any]) -> WriteAction:
    build = _BUILDERS[name]
    return build(customer_id, kw)


def _order(rule: Callable[[Mapping[str, Any]], actions.OrderRule]) -> _Builder:
    return lambda customer, kw: actions.order_action(customer, str(kw["order_id"]), rule(kw))


def _address(kw: Mapping[str, Any]) -> dict[str, str]:
    return {f: str(kw[f]) for f in ADDRESS_FIELDS}


def _ids(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise TypeError("item ids must be a list")
    return [str(v) for v in value]


_Builder = Callable[[str, Mapping[str, Any]], WriteAction]
_BUILDERS: dict[str, _Builder] = {
    "cancel_pending_order": _order(lambda kw: actions.cancel(str(kw["reason"]))),
    "modify_pending_order_address": _order(lambda kw: actions.change_address(_address(kw))),
    "modify_pending_order_items": _order(
        lambda kw: actions.change_items(
            _ids(kw["item_ids"]), _ids(kw["new_item_ids"]), str(kw["payment_method_id"])
        )
    ),
    "modify_pending_order_payment": _order(
        lambda kw: actions.change_payment(str(kw["payment_method_id"]))
    ),
    "return_delivered_order_items": _order(
        lambda kw: actions.request_return(_ids(kw["item_ids"]), str(kw["payment_method_id"]))
    ),
    "exchange_delivered_order_items": _order(
        lambda kw: actions.request_exchange(
            _ids(kw["item_ids"]), _ids(kw["new_item_ids"]), str(kw["payment_method_id"])
        )
    ),
    "modify_user_address": lambda customer, kw: actions.user_address_action(
        customer, str(kw["user_id"]), _address(kw)
    ),
}
