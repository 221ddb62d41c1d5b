"""Rules for the customer record itself."""

from __future__ import annotations

from dataclasses import replace

from app.domain.models import Address, Customer


def modify_user_address(customer: Customer, address: Address) -> Customer:
    """Replace the customer's default address (orders keep their own)."""
    return replace(customer, address=address)
