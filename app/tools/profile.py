"""The verified customer's profile: change their default address."""

from __future__ import annotations

from app.db.writes import WriteAction
from app.tools import summaries
from app.tools.identity import Address1, Address2, City, Country, State, UserId, Zip
from app.tools.order_actions import user_address_action
from app.tools.render import customer_outcome
from app.tools.spec import Confirm, write_tool
from app.tools.writing import Session


@write_tool(
    label="Updating your address …",
    confirm=Confirm("Change the default address of user {user_id}", args=summaries.user_address),
    outcome=customer_outcome,
    done="Address updated",
)
def modify_user_address(
    session: Session,
    user_id: UserId,
    address1: Address1,
    address2: Address2,
    city: City,
    state: State,
    country: Country,
    zip: Zip,
) -> WriteAction:
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
    return user_address_action(session.customer_id, user_id, fields)


TOOLS = (modify_user_address,)
