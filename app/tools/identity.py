"""Identity tools: find and verify the customer, read and change their profile."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool
from pydantic import Field

from app.db.repository import ShopRepository
from app.tools.base import make_tool
from app.tools.order_actions import user_address_action
from app.tools.render import customer_json
from app.tools.scope import (
    MAX_ID_CHARS,
    NOT_VERIFIED,
    Runtime,
    context_of,
    conversation_customer,
    user_not_found,
)
from app.tools.snapshot import read_snapshot
from app.tools.writing import run_write

USER_NOT_FOUND = "Error: user not found"
ALREADY_VERIFIED = (
    "Error: this conversation is already verified for one customer; it cannot serve another. "
    "Continue with the verified customer, or transfer to a human agent."
)
AMBIGUOUS = "Error: more than one customer matches; ask for the customer's email address instead."

MAX_ADDRESS_CHARS = 200

UserId = Annotated[
    str, Field(max_length=MAX_ID_CHARS, description="The user id, such as 'sara_doe_496'.")
]
Address1 = Annotated[
    str,
    Field(
        max_length=MAX_ADDRESS_CHARS,
        description="The first line of the address, such as '123 Main St'.",
    ),
]
Address2 = Annotated[
    str,
    Field(
        max_length=MAX_ADDRESS_CHARS,
        description="The second line of the address, such as 'Apt 1' or ''.",
    ),
]
City = Annotated[
    str, Field(max_length=MAX_ADDRESS_CHARS, description="The city, such as 'San Francisco'.")
]
State = Annotated[str, Field(max_length=MAX_ADDRESS_CHARS, description="The state, such as 'CA'.")]
Country = Annotated[
    str, Field(max_length=MAX_ADDRESS_CHARS, description="The country, such as 'USA'.")
]
Zip = Annotated[
    str, Field(max_length=MAX_ADDRESS_CHARS, description="The zip code, such as '12345'.")
]


def bind_customer(runtime: Runtime, tool_name: str, matches: list[str]) -> str | Command[Any]:
    """Verify the conversation's customer from a lookup's matches (one customer per thread)."""
    bound = conversation_customer(runtime)
    if bound is not None:
        if bound not in matches:
            return ALREADY_VERIFIED
        found = bound
    elif not matches:
        return USER_NOT_FOUND
    elif len(matches) > 1:
        return AMBIGUOUS
    else:
        found = matches[0]
    message = ToolMessage(content=found, tool_call_id=runtime.tool_call_id or "", name=tool_name)
    return Command(update={"verified_user_id": found, "messages": [message]})


def identity_read_tools(pool: AsyncConnectionPool[Any]) -> list[BaseTool]:
    async def find_user_id_by_email(
        email: Annotated[
            str, Field(description="The email of the user, such as 'something@example.com'.")
        ],
        runtime: Runtime,
    ) -> str | Command[Any]:
        """Find the user id by email, and verify that customer for this conversation.

        Use this first to authenticate a customer, even if they already told you their user
        id. Returns the user id, or an error if no user has this email. A conversation serves
        one customer: once verified, a lookup of anyone else fails.
        """
        if context_of(runtime) is None:
            return USER_NOT_FOUND
        async with read_snapshot(pool) as conn:
            matches = await ShopRepository(conn).find_customer_ids_by_email(email)
        return bind_customer(runtime, "find_user_id_by_email", matches)

    async def find_user_id_by_name_zip(
        first_name: Annotated[
            str, Field(description="The first name of the customer, such as 'John'.")
        ],
        last_name: Annotated[
            str, Field(description="The last name of the customer, such as 'Doe'.")
        ],
        zip: Annotated[str, Field(description="The zip code of the customer, such as '12345'.")],
        runtime: Runtime,
    ) -> str | Command[Any]:
        """Find the user id by first name, last name and zip code, and verify that customer.

        Look customers up by email first (find_user_id_by_email); use this only when they
        cannot be found by email or do not remember it. Returns the user id, or an error if
        nobody matches. Once a customer is verified, a lookup of anyone else fails.
        """
        if context_of(runtime) is None:
            return USER_NOT_FOUND
        async with read_snapshot(pool) as conn:
            repo = ShopRepository(conn)
            matches = await repo.find_customer_ids_by_name_zip(first_name, last_name, zip)
        return bind_customer(runtime, "find_user_id_by_name_zip", matches)

    async def get_user_details(user_id: UserId, runtime: Runtime) -> str:
        """Get the details of the verified customer: name, default address, email, payment
        methods (with gift card balances) and the ids of their orders.

        Only works for the customer verified in this conversation. Use get_order_details for
        an order's contents.
        """
        customer_id = conversation_customer(runtime)
        if customer_id is None:
            return NOT_VERIFIED
        if user_id != customer_id:
            return f"Error: {user_not_found(user_id)}"
        async with read_snapshot(pool) as conn:
            customer = await ShopRepository(conn).get_customer(customer_id)
        if customer is None:
            return f"Error: {user_not_found(user_id)}"
        return customer_json(customer)

    return [
        make_tool("find_user_id_by_email", find_user_id_by_email),
        make_tool("find_user_id_by_name_zip", find_user_id_by_name_zip),
        make_tool("get_user_details", get_user_details),
    ]


def identity_write_tools(pool: AsyncConnectionPool[Any]) -> list[BaseTool]:
    async def modify_user_address(
        user_id: UserId,
        address1: Address1,
        address2: Address2,
        city: City,
        state: State,
        country: Country,
        zip: Zip,
        runtime: Runtime,
    ) -> str:
        """Change the default address of the verified customer (their profile, not an order).

        To change where a pending order ships, use modify_pending_order_address instead.
        Before calling, tell the customer the full new address and get their explicit yes.
        Returns the updated user details.
        """
        fields = {
            "address1": address1,
            "address2": address2,
            "city": city,
            "state": state,
            "country": country,
            "zip": zip,
        }
        outcome = await run_write(
            pool,
            runtime,
            tool_name="modify_user_address",
            args={"user_id": user_id, **fields},
            action_for=lambda customer_id: user_address_action(customer_id, user_id, fields),
        )
        return outcome.text

    return [make_tool("modify_user_address", modify_user_address)]
