"""One canonical JSON (app/jsontext.py) for every key and fingerprint, pinned.

The values below were computed with the code before the three forms became one: a write's
idempotency key is stored with its record, so a change here would make a retried write run
twice. The tool cache's keys kept their bytes for every argument a model's JSON can carry
(strings, integers, booleans, null, lists, objects); only a float with no fraction or in
exponent form is now written as Decimal normalises it (5.0 -> 5), a cache miss at worst.
The repeat guard's fingerprint lost the spaces of `json.dumps`'s default separators: it
lives one turn in the state, so a turn running across the upgrade misses one hint at most.
"""

from __future__ import annotations

from decimal import Decimal

from app.agent.books import fingerprint
from app.agent.cache import cache_key
from app.db.idempotency import idempotency_key
from app.jsontext import canonical_json


class TestIdempotencyKeysKeepTheirBytes:
    def test_a_cancel(self) -> None:
        key = idempotency_key(
            "sara_doe_496:s1",
            "turn_1",
            "cancel_pending_order",
            {"order_id": "#W2611340", "reason": "no longer needed"},
        )
        assert key == "18f4f34a4d9d7226d10a8ec0f026e671d6011584bd54be26e3983d487722b322"

    def test_an_exchange_with_a_decimal_amount(self) -> None:
        args = {
            "order_id": "#W1",
            "item_ids": ["1", "2"],
            "new_item_ids": ["3", "4"],
            "payment_method_id": "gift_card_1",
            "amount": Decimal("5.00"),
        }
        key = idempotency_key("noah_brown_6181:web", "h1", "modify_pending_order_items", args)
        assert key == "ca64bb5f80ea34b27bfe2d02f891ef767a82d83a34307d9a3b754d067cecc5a0"


class TestCacheKeysKeepTheirBytes:
    def test_one_argument(self) -> None:
        key = cache_key("get_order_details", {"order_id": "#W2611340"})
        assert key == 'get_order_details:{"order_id":"#W2611340"}'

    def test_keys_sorted(self) -> None:
        key = cache_key(
            "find_user_id_by_name_zip", {"zip": "19122", "last_name": "Brown", "first_name": "Noah"}
        )
        assert (
            key
            == 'find_user_id_by_name_zip:{"first_name":"Noah","last_name":"Brown","zip":"19122"}'
        )

    def test_nested_values_and_non_ascii_text(self) -> None:
        key = cache_key("t", {"b": [1, True, None], "a": {"y": "é", "x": 2}})
        assert key == 't:{"a":{"x":2,"y":"\\u00e9"},"b":[1,true,null]}'


class TestOneForm:
    def test_numbers_that_are_equal_write_the_same(self) -> None:
        assert canonical_json({"n": 5}) == canonical_json({"n": 5.0})
        assert canonical_json({"n": 5}) == canonical_json({"n": Decimal("5.00")})

    def test_the_fingerprint_is_the_canonical_jsons_hash(self) -> None:
        content = '{"status": "pending"}'
        assert fingerprint("get_order_details", {"order_id": "#W1"}, content) == "805b180e42e9c551"
        assert fingerprint("t", {"a": 1, "b": 2}, "x") == fingerprint("t", {"b": 2, "a": 1}, "x")
