from __future__ import annotations

import pytest

from app.domain.addresses import MAX_FIELD_LENGTH, make_address
from app.domain.customers import modify_user_address
from app.domain.errors import RuleViolation
from app.domain.models import Address
from tests import factories as f


class TestMakeAddress:
    def test_fields_are_trimmed_and_address2_may_be_empty(self) -> None:
        a = make_address(" 9 Oak Ave ", "", "Boston", "MA", "USA", " 02110 ")
        assert a == Address("9 Oak Ave", "", "Boston", "MA", "USA", "02110")

    def test_blank_required_fields_are_named(self) -> None:
        with pytest.raises(RuleViolation, match="non-empty city, zip"):
            make_address("9 Oak Ave", "", "  ", "MA", "USA", "")

    def test_overlong_field_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="address1 is longer"):
            make_address("x" * (MAX_FIELD_LENGTH + 1), "", "Boston", "MA", "USA", "02110")


class TestModifyUserAddress:
    def test_default_address_is_replaced_and_nothing_else(self) -> None:
        new = Address("9 Oak Ave", "", "Boston", "MA", "USA", "02110")
        before = f.customer(order_ids=("#W0000001",))
        after = modify_user_address(before, new)
        assert after.address == new
        assert (after.id, after.payment_methods, after.order_ids) == (
            before.id,
            before.payment_methods,
            before.order_ids,
        )
