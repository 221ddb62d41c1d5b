from __future__ import annotations

from decimal import Decimal

import pytest

from app.domain.errors import RuleViolation
from app.domain.shipping import calc_shipping


class TestShippingCost:
    def test_base_plus_distance_plus_weight(self) -> None:
        assert calc_shipping(Decimal("10"), Decimal("2")) == Decimal("17.00")

    def test_zero_distance_and_weight_cost_the_base_fee(self) -> None:
        assert calc_shipping(Decimal("0"), Decimal("0")) == Decimal("5.00")

    def test_result_is_rounded_half_up_to_the_cent(self) -> None:
        # 5 + 0.8 * 0.00625 = 5.005 -> 5.01
        assert calc_shipping(Decimal("0.00625"), Decimal("0")) == Decimal("5.01")

    def test_limits_are_inclusive(self) -> None:
        assert calc_shipping(Decimal("20000"), Decimal("1000")) == Decimal("18005.00")


class TestShippingRejectsBadInput:
    @pytest.mark.parametrize(
        ("distance", "weight", "message"),
        [
            ("-1", "1", "distance_km must not be negative"),
            ("1", "-0.1", "weight_kg must not be negative"),
            ("NaN", "1", "distance_km must be a finite"),
            ("1", "Infinity", "weight_kg must be a finite"),
            ("20000.01", "1", "distance_km must be at most 20000"),
            ("1", "1000.5", "weight_kg must be at most 1000"),
        ],
    )
    def test_out_of_range_values_are_refused(
        self, distance: str, weight: str, message: str
    ) -> None:
        with pytest.raises(RuleViolation, match=message):
            calc_shipping(Decimal(distance), Decimal(weight))
