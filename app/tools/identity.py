"""Identity tools: locate the customer, prove a guest is that customer, read and change
their profile, and the one status-only order lookup a guest may make unverified."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.db.repository import ShopRepository
from app.tools.render import customer_found, customer_view
from app.tools.results import Observation, error, error_text, failed_with, found
from app.tools.scope import (
    MAX_ID_CHARS,
    Runtime,
    context_of,
    conversation_customer,
    not_verified,
    user_not_found,
)
from app.tools.snapshot import read_snapshot
from app.tools.spec import PERSONAL, ToolDeps, read_tool
from app.tools.text import generic_lines

USER_NOT_FOUND = error_text("user not found")
ALREADY_VERIFIED = error_text(
    "this conversation is already verified for one customer; it cannot serve another. "
    "Continue with the verified customer, or transfer to a human agent."
)
# The one answer a guest's lookup gets, whether it matched a customer or not.
CODE_SENT = (
    "Verification started: if these details match a customer, a {digits}-digit code is on its "
    "way to the email address on that account (valid {minutes} minutes). Ask the customer to "
    "type the code, then call confirm_identity with it. Share nothing about any account until "
    "confirm_identity returns a user id."
)
TOO_MANY_CODES = error_text(
    "too many verification codes were asked for; no new code was sent. The customer "
    "can use the last code, try again in an hour, or be transferred to a human agent."
)
WRONG_CODE = (
    "Not verified: that code is not correct; {left} attempt(s) left. Ask the customer to "
    "check the code in the email and type it again."
)
NO_ATTEMPTS = (
    "Not verified: that code is not correct and no attempts are left. To try again, look the "
    "customer up again (find_user_id_by_email or find_user_id_by_name_zip) to send a new code."
)
NO_CODE = (
    "Not verified: this conversation has no active code (none was sent, it expired, or it "
    "was used up). Look the customer up again (find_user_id_by_email or "
    "find_user_id_by_name_zip) to send a new one."
)
NO_CODE_NEEDED = "The customer is already verified as user id {user_id}; no code is needed."
NO_ORDER_MATCH = error_text("no order matches that order id and email address.")

MAX_ADDRESS_CHARS = 200
MAX_EMAIL_CHARS = 254

UserId = Annotated[
    str, Field(max_length=MAX_ID_CHARS, description="The user id, such as 'sara_doe_496'.")
]
Email = Annotated[
    str,
    Field(
        max_length=MAX_EMAIL_CHARS,
        description="The email of the user, such as 'something@example.com'.",
    ),
]
Code = Annotated[
    str,
    Field(
        max_length=32,
        description="The code exactly as the customer typed it, such as '123456'.",
    ),
]
OrderId = Annotated[
    str,
    Field(
        max_length=MAX_ID_CHARS,
        description="The order id, such as '#W0000000'. Be careful: it starts with a '#'.",
    ),
]
Address1 = Annotated[
    str,
    Field(
        max_length=MAX_ADDRESS_CHARS,
        description="The first line of the address, such as '123 Main St'.",
    ),
    PERSONAL,
]
Address2 = Annotated[
    str,
    Field(
        max_length=MAX_ADDRESS_CHARS,
        description="The second line of the address, such as 'Apt 1' or ''.",
    ),
    PERSONAL,
]
City = Annotated[
    str,
    Field(max_length=MAX_ADDRESS_CHARS, description="The city, such as 'San Francisco'."),
    PERSONAL,
]
State = Annotated[
    str, Field(max_length=MAX_ADDRESS_CHARS, description="The state, such as 'CA'."), PERSONAL
]
Country = Annotated[
    str, Field(max_length=MAX_ADDRESS_CHARS, description="The country, such as 'USA'."), PERSONAL
]
Zip = Annotated[
    str, Field(max_length=MAX_ADDRESS_CHARS, description="The zip code, such as '12345'."), PERSONAL
]


def verified(user_id: str, *, labelled: bool = False) -> Observation:
    """The conversation's customer, written to state (only the identity tools do this)."""
    return found(
        user_id,
        (lambda v: f"User id: {v} (verified for this conversation)") if labelled else None,
        ids={"customer": [user_id]},
        changes={"verified_user_id": user_id},
    )


async def located(deps: ToolDeps, runtime: Runtime, matches: list[str]) -> Observation:
    """A verified conversation resolves only to its own customer. A guest's lookup starts a
    code, and answers the same whatever it matched."""
    context = context_of(runtime)
    if context is None:
        return failed_with("not_found", USER_NOT_FOUND)
    bound = conversation_customer(runtime)
    if bound is not None:
        if bound in matches:
            return verified(bound, labelled=True)
        return failed_with("refused", ALREADY_VERIFIED)
    started = await deps.codes.start(
        thread_id=context.thread_id,
        requested_by=context.user_id,
        customer_id=matches[0] if len(matches) == 1 else None,
    )
    if not started:
        return failed_with("refused", TOO_MANY_CODES)
    return found(CODE_SENT.format(digits=6, minutes=deps.codes.policy.minutes))


# The lookups and the code are never served from the cache: each call starts or checks a
# code, or writes the verified customer to state.
@read_tool(label="Looking up your account …", cacheable=False, done="Account found")
async def find_user_id_by_email(deps: ToolDeps, email: Email, runtime: Runtime) -> Observation:
    """Find the customer by email. Use this first, even if they told you their user id.

    For a signed-in or verified customer, returns their user id. For a guest, it starts
    verification: a one-time code is emailed to the address on the account, and the
    answer is the same whether or not the email belongs to anyone. Then ask the customer
    for the code and call confirm_identity. A conversation serves one customer: once
    verified, a lookup of anyone else fails.
    """
    async with read_snapshot(deps.pool) as conn:
        matches = await ShopRepository(conn).find_customer_ids_by_email(email)
    return await located(deps, runtime, matches)


@read_tool(label="Looking up your account …", cacheable=False, done="Account found")
async def find_user_id_by_name_zip(
    deps: ToolDeps,
    first_name: Annotated[
        str, Field(description="The first name of the customer, such as 'John'.")
    ],
    last_name: Annotated[str, Field(description="The last name of the customer, such as 'Doe'.")],
    zip: Annotated[str, Field(description="The zip code of the customer, such as '12345'.")],
    runtime: Runtime,
) -> Observation:
    """Find the customer by first name, last name and zip code.

    Look customers up by email first (find_user_id_by_email); use this only when they
    cannot be found by email or do not remember it. Works like find_user_id_by_email:
    for a guest it starts verification with a code emailed to the address on the
    account. Once a customer is verified, a lookup of anyone else fails.
    """
    async with read_snapshot(deps.pool) as conn:
        repo = ShopRepository(conn)
        matches = await repo.find_customer_ids_by_name_zip(first_name, last_name, zip)
    return await located(deps, runtime, matches)


@read_tool(label="Checking your code …", cacheable=False, done="Identity confirmed")
async def confirm_identity(deps: ToolDeps, code: Code, runtime: Runtime) -> Observation:
    """Finish verifying a guest with the one-time code that find_user_id_by_email (or
    find_user_id_by_name_zip) emailed to the customer.

    Call it only with a code the customer typed in this conversation; never guess one.
    Returns the verified user id, or "Not verified: ..." with what to do next.
    """
    context = context_of(runtime)
    if context is None:
        return failed_with("not_found", USER_NOT_FOUND)
    bound = conversation_customer(runtime)
    if bound is not None:
        return found(NO_CODE_NEEDED.format(user_id=bound))
    check = await deps.codes.confirm(thread_id=context.thread_id, code=code)
    if check.customer_id is not None:
        return verified(check.customer_id)
    if not check.active:
        return found(NO_CODE)
    return found(
        WRONG_CODE.format(left=check.attempts_left) if check.attempts_left else NO_ATTEMPTS
    )


@read_tool(label="Fetching your account details …", done="Account details found")
async def get_user_details(deps: ToolDeps, user_id: UserId, runtime: Runtime) -> Observation:
    """Get the details of the verified customer: name, default address, email, payment
    methods (with gift card balances) and the ids of their orders.

    Only works for the customer verified in this conversation. Use get_order_details for
    an order's contents.
    """
    customer_id = conversation_customer(runtime)
    if customer_id is None:
        return not_verified()
    if user_id != customer_id:
        return error("not_found", user_not_found(user_id))
    async with read_snapshot(deps.pool) as conn:
        customer = await ShopRepository(conn).get_customer(customer_id)
    if customer is None:
        return error("not_found", user_not_found(user_id))
    return customer_found(customer_view(customer))


@read_tool(label="Checking the status of {order} …")
async def get_order_status(
    deps: ToolDeps, order_id: OrderId, email: Email, runtime: Runtime
) -> Observation:
    """Only the status of one order, for anyone who gives both its order id and the
    email address on its account, as a "track my order" page does: no verification.

    Returns {"order_id", "status"} and nothing else, or the same "no match" error
    whether the order does not exist or the email is not its customer's. For the
    order's details or any change, verify the customer and use get_order_details.
    """
    async with read_snapshot(deps.pool) as conn:
        cur = await conn.execute(
            "SELECT o.id, o.status FROM orders o JOIN customers c ON c.id = o.customer_id "
            "WHERE o.id = %s AND lower(c.email) = lower(%s)",
            (order_id.strip(), email.strip()),
        )
        row = await cur.fetchone()
    if row is None:
        return failed_with("not_found", NO_ORDER_MATCH)
    return found(
        {"order_id": row["id"], "status": row["status"]},
        lambda value: generic_lines("get_order_status", value),
        ids={"order": [row["id"]]},
    )


TOOLS = (
    find_user_id_by_email,
    find_user_id_by_name_zip,
    confirm_identity,
    get_user_details,
    get_order_status,
)
