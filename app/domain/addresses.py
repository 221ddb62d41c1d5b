"""Building a valid address from the fields a tool receives."""

from __future__ import annotations

from app.domain.errors import RuleViolation
from app.domain.models import Address

MAX_FIELD_LENGTH = 200


def make_address(
    address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> Address:
    """Trim every field; all but address2 must be non-empty."""
    fields = {
        "address1": address1.strip(),
        "address2": address2.strip(),
        "city": city.strip(),
        "state": state.strip(),
        "country": country.strip(),
        "zip": zip.strip(),
    }
    missing = [name for name, value in fields.items() if not value and name != "address2"]
    if missing:
        raise RuleViolation(f"the address needs a non-empty {', '.join(missing)}.")
    too_long = [name for name, value in fields.items() if len(value) > MAX_FIELD_LENGTH]
    if too_long:
        raise RuleViolation(
            f"address field {', '.join(too_long)} is longer than {MAX_FIELD_LENGTH} characters."
        )
    return Address(**fields)
