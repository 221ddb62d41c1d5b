"""What a simulated customer does: one operation per new thread, each to its end.

Each operation records what the client was told (records.py): the turns acknowledged to it,
the writes it approved, declined or asked for with confirmation off, the threads it rewound
or deleted. An operation returns its outcome for the report.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from app.api.auth import issue_token
from tests.chaos.client import Client, NothingPending
from tests.chaos.model import CHECKING, DONE, NOT_DONE, NOTED, STORY
from tests.chaos.records import Action, Turn, Write
from tests.scale.topology import JWT_SECRET

STAFF = "staff-chaos"
STAFF_SAYS = "Hello, this is a person from the shop. I am looking into it."

Op = Callable[["Context"], Awaitable[str]]


class Context:
    """One operation: its client, its fresh thread, and a random source of its own."""

    def __init__(self, client: Client, kind: str, rng: random.Random) -> None:
        self.client = client
        self.kind = kind
        self.rng = rng
        self.session = f"{kind}-{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}"
        self.thread = f"{client.customer}:{self.session}"
        self.turns = 0
        self.last_content = ""
        client.mentioned = set()

    @property
    def base(self) -> str:
        return f"/threads/{self.session}"

    async def say(self, content: str, expected: str | None = None, **options: Any) -> str:
        """One message to its end; the done status. `content` gets a unique reference;
        `expected`: the model's whole answer to it."""
        self.turns += 1
        content = f"{content} (ref {self.session} {self.turns})"
        body = {"content": content, "client_message_id": f"m{self.turns}"}
        seen = await self.client.run(self.base + "/messages", body, thread=self.thread, **options)
        assert seen.done is not None
        status = str(seen.done["status"])
        if status == "completed":
            self.acknowledge(content)
        self.last_content = content
        return status

    def acknowledge(self, content: str) -> None:
        c = self.client
        c.records.turns.append(Turn(self.thread, self.session, c.customer, c.pool, content))

    async def decide(self, decision: str) -> str:
        """The decision on the pending write; `completed` once the answer is done."""
        try:
            seen = await self.client.run(
                self.base + "/resume", {"decision": decision}, thread=self.thread
            )
        except NothingPending:
            # The decision was taken by an earlier try whose answer was lost: say so, and a
            # new message finishes the turn (README: an approved write runs when the thread
            # is next touched).
            return await self.say("[note] did that go through?", NOTED)
        assert seen.done is not None
        return str(seen.done["status"])


async def read_order(ctx: Context) -> str:
    order = ctx.rng.choice(ctx.client.shop.orders_of(ctx.client.customer))
    return await ctx.say(f"[order] where is my order {order}?")


async def read_profile(ctx: Context) -> str:
    return await ctx.say(f"[profile] {ctx.client.customer} what is on my account?")


async def read_other(ctx: Context) -> str:
    """Another customer's order: the answer must say nothing of it."""
    shop = ctx.client.shop
    other = ctx.rng.choice([c for c in shop.customers if c != ctx.client.customer])
    order = ctx.rng.choice(shop.orders_of(other))
    ctx.client.mentioned = {order}
    return await ctx.say(f"[order] where is order {order}?")


async def _write(ctx: Context, decision: str) -> str:
    c = ctx.client
    order = c.shop.take_order(c.customer)
    if order is None:
        return await read_profile(ctx)
    status = await ctx.say(f"[cancel] please cancel {order}")
    if decision == "unconfirmed":  # a replica with WRITE_CONFIRMATION=off: no interrupt
        if status == "completed":
            c.records.writes.append(Write(ctx.thread, ctx.session, c.customer, c.pool, order, "-"))
        return f"{status}"
    if status != "interrupted":
        return f"no confirmation asked ({status})"
    # Recorded before it is sent: a decision whose answer is lost may still have been taken.
    c.records.writes.append(Write(ctx.thread, ctx.session, c.customer, c.pool, order, decision))
    return await ctx.decide(decision)


async def write_approve(ctx: Context) -> str:
    return await _write(ctx, "approve")


async def write_decline(ctx: Context) -> str:
    return await _write(ctx, "reject")


async def write_unconfirmed(ctx: Context) -> str:
    return await _write(ctx, "unconfirmed")


async def handoff_unconfirmed(ctx: Context) -> str:
    status = await ctx.say("[handoff] I want to talk to a human")
    if status == "completed":
        c = ctx.client
        c.records.writes.append(Write(ctx.thread, ctx.session, c.customer, c.pool, "handoff", "-"))
    return status


@contextmanager
def as_staff(ctx: Context) -> Iterator[None]:
    """The client's requests go out as the shop's scripted staff member meanwhile."""
    token = issue_token(JWT_SECRET, STAFF, role="staff", name="Chaos", ttl_s=24 * 3600)
    customer, ctx.client.headers = ctx.client.headers, {"Authorization": f"Bearer {token}"}
    try:
        yield
    finally:
        ctx.client.headers = customer


async def _control(ctx: Context, action: str) -> bool:
    """accept or release, compare-and-set on the version read just before; False when the
    thread is not in a state for it (read again and tried a few times)."""
    path = f"/staff/threads/{ctx.thread}/control"
    with as_staff(ctx):
        for _ in range(5):
            control = (await ctx.client.request("GET", path)).json()
            body = {"action": action, "version": control["version"]}
            if (await ctx.client.request("POST", path, json=body)).status_code == 200:
                return True
    return False


async def takeover(ctx: Context) -> str:
    """A hand-over, a person who accepts it, a customer message the person gets (no
    agent run while the person holds the thread), the person's reply, the release, and the
    agent answering again."""
    c = ctx.client
    if await ctx.say("[handoff] I want to talk to a human") != "completed":
        return "not handed off"
    c.records.writes.append(Write(ctx.thread, ctx.session, c.customer, c.pool, "handoff", "-"))
    if not await _control(ctx, "accept"):
        return "not accepted"
    c.records.held.add(ctx.thread)
    held = await ctx.say("[note] are you still there?")
    with as_staff(ctx):
        body = {"content": STAFF_SAYS, "client_message_id": "staff-1"}
        await c.request("POST", f"/staff/threads/{ctx.thread}/messages", json=body)
    if not await _control(ctx, "release"):
        return f"held message {held}; not released"
    return f"held message {held}; released, then {await ctx.say('[note] thanks', NOTED)}"


async def cancel(ctx: Context) -> str:
    """A long answer, cancelled after a few tokens (from whichever replica the balancer
    picks); `cancelled`, or `completed` when the answer won the race."""
    return await ctx.say("[story] tell me about deliveries", cancel_after=ctx.rng.randint(1, 8))


async def drop_and_resume(ctx: Context) -> str:
    """A long answer, left after a few tokens and followed again with Last-Event-ID."""
    return await ctx.say(
        "[story] tell me about deliveries", STORY, drop_after=ctx.rng.randint(1, 20)
    )


async def rewind(ctx: Context) -> str:
    """Two turns, a rewind to before the second ("edit and regenerate"), a new second."""
    await ctx.say("[note] first question", NOTED)
    await ctx.say("[note] second question", NOTED)
    second = ctx.last_content
    state = (await ctx.client.request("GET", ctx.base + "/state")).json()
    ids = [m["id"] for m in state["messages"] if m["content"] == second]
    if not ids:
        return "second turn missing before the rewind"
    # Marked first: a rewind whose answer is lost may have happened.
    ctx.client.records.superseded.add((ctx.thread, second))
    response = await ctx.client.request("POST", ctx.base + "/rewind", json={"message_id": ids[0]})
    if response.status_code != 200:
        return f"rewind {response.status_code}"
    return await ctx.say("[note] the second question, edited", NOTED)


async def delete(ctx: Context) -> str:
    await ctx.say("[note] a question", NOTED)
    response = await ctx.client.request("DELETE", ctx.base)
    c = ctx.client
    if response.status_code in (204, 404):  # 404: an earlier try's answer was lost
        c.records.deleted[ctx.thread] = (c.customer, ctx.session, c.pool)
        return f"deleted {response.status_code}"
    return f"delete {response.status_code}"


def _action_arguments(ctx: Context, tool: str) -> dict[str, Any]:
    """The model's arguments: a number no other operation of the run uses, so the servers'
    journals say which operation each applied write was for."""
    n = next(ctx.client.records.numbers)
    if tool == "issue_voucher":
        return {"amount": n}
    if tool == "redeem_points":
        return {"points": n}
    return {"invoice_id": f"INV-{n}", "amount": n}


async def _action(ctx: Context, tool: str, decision: str) -> str:
    """An external write (MCP or HTTP), confirmed or declined, and what the customer was
    told of it: DONE only when the server's answer came back."""
    c = ctx.client
    args = _action_arguments(ctx, tool)
    words = " ".join(f"{k}={v}" for k, v in args.items())
    if await ctx.say(f"[action] {tool} {words}") != "interrupted":
        return "no confirmation asked"
    action = Action(ctx.thread, ctx.session, c.customer, tool, args, decision)
    c.records.actions.append(action)  # before it is sent: a lost answer may have been taken
    try:
        seen = await c.run(ctx.base + "/resume", {"decision": decision}, thread=ctx.thread)
    except NothingPending:
        # An earlier try took the decision and its answer was lost: nothing was told.
        return f"decided earlier; then {await ctx.say('[note] did that go through?', NOTED)}"
    assert seen.done is not None
    answer = "".join(seen.tokens)
    if seen.done["status"] == "completed":
        if answer.startswith(DONE):
            action.told = "done"
        elif answer == CHECKING:
            action.told = "unknown"
        elif answer.startswith(NOT_DONE):
            action.told = "failed"
    return f"{seen.done['status']} {action.told or 'told nothing'}"


async def action_voucher(ctx: Context) -> str:
    """MCP, idempotent: a voucher issued once per key."""
    return await _action(ctx, "issue_voucher", "approve")


async def action_redeem(ctx: Context) -> str:
    """MCP, not idempotent: never resent; an unknown outcome goes to a person."""
    return await _action(ctx, "redeem_points", "approve")


async def action_refund(ctx: Context) -> str:
    """HTTP (OpenAPI), idempotent by its Idempotency-Key header."""
    return await _action(ctx, "createRefundRequest", "approve")


async def action_decline(ctx: Context) -> str:
    tool = ctx.rng.choice(["issue_voucher", "redeem_points", "createRefundRequest"])
    return await _action(ctx, tool, "reject")


# (operation, weight) for each pool: `confirm` replicas ask before a write, `direct` not.
CONFIRM_OPS: list[tuple[Op, int]] = [
    (read_order, 20),
    (read_profile, 8),
    (read_other, 6),
    (write_approve, 16),
    (write_decline, 8),
    (cancel, 8),
    (drop_and_resume, 8),
    (rewind, 6),
    (delete, 6),
    (action_voucher, 4),
    (action_redeem, 4),
    (action_refund, 4),
    (action_decline, 2),
]
DIRECT_OPS: list[tuple[Op, int]] = [
    (write_unconfirmed, 6),
    (handoff_unconfirmed, 2),
    (takeover, 2),
    (read_order, 2),
]
