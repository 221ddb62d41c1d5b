"""`cs-agent eval record`: real conversations as evaluation tasks.

For each conversation: the customer's lines and confirmation answers (app/eval/transcript),
the customer's records as they were before its first write, rebuilt from the write audit's
before-images (app/eval/rebuild), the products it touched, its successful writes as gold
actions, and how it ended with the touched records as its writes left them. Names,
emails, user ids and addresses are then replaced by consistent fakes (app/eval/fakes)
unless asked to keep them, before anything is given to the instruction's writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from psycopg import AsyncConnection

from app.eval import recording
from app.eval.fakes import Fakes
from app.eval.instruction import Customer, template, written_by_model
from app.eval.rebuild import MissingImage, check_images, groups_after, groups_at, tau_data
from app.eval.simulator import ChatModel
from app.eval.tasks import Action, Task
from app.eval.transcript import Transcript, read_runs

ADDRESS_KEYS = frozenset({"address1", "address2", "city", "state", "country", "zip"})
ITEM_KEYS = ("item_ids", "new_item_ids", "item_id")


@dataclass(frozen=True)
class RecordOptions:
    threads: Sequence[str] = ()
    since_s: float | None = None
    flag: str | None = None
    result: str | None = None
    keep_personal_data: bool = False


@dataclass
class Recorded:
    tasks: list[Task] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (thread id, why)


class Skip(Exception):
    """A conversation that cannot become a task; the message says why."""


async def record(
    conn: AsyncConnection[Any], options: RecordOptions, writer: ChatModel | None = None
) -> Recorded:
    """`conn`: autocommit, dict rows. `writer`: the user-simulator model, or None for the
    template instruction."""
    threads = list(options.threads)
    if options.since_s is not None:
        threads += await recording.select_threads(
            conn, since_s=options.since_s, flag=options.flag, result=options.result
        )
    out = Recorded()
    fakes = None if options.keep_personal_data else Fakes()
    seen: set[str] = set()
    for thread_id in dict.fromkeys(threads):
        try:
            raw = await _task_json(conn, thread_id)
        except Skip as why:
            out.skipped.append((thread_id, str(why)))
            continue
        turns = raw.pop("turns")
        if fakes is not None:
            turns = _fake(fakes, raw, turns)
        who = _customer(raw)
        if writer is None:
            raw["instruction"] = template(
                who, raw["customer_lines"], handed_off=raw["expected"]["handoff"]
            )
        else:
            raw["instruction"] = await written_by_model(writer, who, turns)
        raw["id"] = _unique(raw["id"], seen)
        out.tasks.append(_task(raw))
    _distinct_instructions(out.tasks)
    return out


async def _task_json(conn: AsyncConnection[Any], thread_id: str) -> dict[str, Any]:
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conversation = await recording.load_conversation(conn, thread_id)
        if conversation is None:
            raise Skip("no such conversation")
        customer_id = conversation.customer_id
        if customer_id is None:
            raise Skip("a guest conversation that never proved who the customer is")
        said = read_runs(conversation.runs)
        if not said.customer_lines:
            raise Skip("the customer said nothing to the agent")
        later = await recording.writes_from(conn, customer_id, conversation)
        try:
            check_images(later)
        except MissingImage as e:
            raise Skip(str(e)) from None
        now = await recording.current_groups(conn, customer_id)
        if not now:
            raise Skip(f"customer {customer_id} is no longer in the shop")
        start = groups_at(now, later)
        after = groups_after(now, later, thread_id)
        product_rows = await _products(conn, start, after, said)
    data = {**tau_data(start), "products": product_rows}
    records = tau_data(after)
    for user_id, user in records["users"].items():  # no write adds or removes an order
        user["orders"] = data["users"][user_id]["orders"]
    handed_off = said.handed_off or conversation.handoff_tickets > 0
    expected = {
        "result": _result(conversation.result, said, handed_off=handed_off),
        "handoff": handed_off,
        "declined": said.declined,
        "records": records,
    }
    session = thread_id.split(":", 1)[1] if ":" in thread_id else thread_id
    task: dict[str, Any] = _plain(
        {
            "id": f"rec-{session}",
            "user_id": customer_id,
            "actions": [
                {"name": w.tool_name, "kwargs": w.arguments} for w in conversation.writes if w.ok
            ],
            "outputs": [],
            "customer_lines": said.customer_lines,
            "expected": expected,
            "data": data,
            "turns": said.turns,
        }
    )
    return task


async def _products(
    conn: AsyncConnection[Any], start: Any, after: Any, said: Transcript
) -> dict[str, Any]:
    items = [row for g in (start, after) for t in g.values() for row in t.get("order_items", [])]
    calls = [c["args"] for c in said.tool_calls]
    return await recording.products(
        conn,
        [i["product_id"] for i in items] + recording.ids_in(calls, "product_id"),
        [x for key in ITEM_KEYS for x in recording.ids_in(calls, key)],
        every=any(c["name"] == "list_all_product_types" for c in said.tool_calls),
    )


def _result(analytics: str | None, said: Transcript, *, handed_off: bool) -> str:
    if handed_off:
        return "handed_off"
    if said.left_unanswered:
        return "abandoned"
    return analytics or "resolved"


def _customer(raw: dict[str, Any]) -> Customer:
    user = raw["data"]["users"][raw["user_id"]]
    name = f"{user['name']['first_name']} {user['name']['last_name']}"
    return Customer(raw["user_id"], name, user["email"], user["address"]["zip"])


def _task(raw: dict[str, Any]) -> Task:
    return Task(
        id=raw["id"],
        user_id=raw["user_id"],
        instruction=raw["instruction"],
        actions=tuple(Action(a["name"], a["kwargs"]) for a in raw["actions"]),
        outputs=(),
        customer_lines=tuple(raw["customer_lines"]),
        data=raw["data"],
        expected=raw["expected"],
    )


def _unique(task_id: str, seen: set[str]) -> str:
    candidate, n = task_id, 2
    while candidate in seen:
        candidate, n = f"{task_id}-{n}", n + 1
    seen.add(candidate)
    return candidate


def _distinct_instructions(tasks: list[Task]) -> None:
    """The scripted customer finds its task by the instruction: no two may be the same."""
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        if task.instruction in seen:
            text = f"{task.instruction}\n(Recorded conversation {task.id}.)"
            tasks[index] = replace(task, instruction=text)
        seen.add(tasks[index].instruction)


def _plain(value: Any) -> Any:
    """JSON values only: money read as Decimal becomes a number again."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# -- personal data ----------------------------------------------------------------------------


def _fake(fakes: Fakes, raw: dict[str, Any], turns: list[Any]) -> list[tuple[str, str]]:
    """Replace the task's personal data in place; returns the transcript turns, faked.
    Structured values first (so every real value is known), then the free text."""
    data, records = raw["data"], raw["expected"]["records"]
    users = [u for part in (data, records) for u in part["users"].items()]
    ids = {
        uid: fakes.user_id(uid, u["name"]["first_name"], u["name"]["last_name"]) for uid, u in users
    }
    for part in (data, records):
        part["users"] = {ids[uid]: _fake_user(fakes, u) for uid, u in part["users"].items()}
        for order in part["orders"].values():
            order["user_id"] = ids.get(order["user_id"], order["user_id"])
            order["address"] = fakes.address(order["address"])
    raw["user_id"] = ids.get(raw["user_id"], raw["user_id"])
    for action in raw["actions"]:
        action["kwargs"] = _fake_kwargs(fakes, action["kwargs"], ids)
    raw["customer_lines"] = [fakes.text(line) for line in raw["customer_lines"]]
    return [(speaker, fakes.text(text)) for speaker, text in turns]


def _fake_user(fakes: Fakes, user: dict[str, Any]) -> dict[str, Any]:
    name = user["name"]
    return {
        **user,
        "name": {
            "first_name": fakes.first_name(name["first_name"]),
            "last_name": fakes.last_name(name["last_name"]),
        },
        "email": fakes.email(user["email"]),
        "address": fakes.address(user["address"]),
    }


def _fake_kwargs(fakes: Fakes, kwargs: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    out = fakes.address({k: v for k, v in kwargs.items() if k in ADDRESS_KEYS})
    for key, value in kwargs.items():
        if key in ADDRESS_KEYS:
            continue
        if key == "user_id" and isinstance(value, str):
            out[key] = ids.get(value, value)
        elif key == "email" and isinstance(value, str):
            out[key] = fakes.email(value)
        elif isinstance(value, str):
            out[key] = fakes.text(value)
        else:
            out[key] = value
    return {k: out[k] for k in kwargs}
