"""The tool-result cache: keys, tags, ageing and invalidation (pure functions)."""

from __future__ import annotations

import json

from app.agent.cache import CacheEntry, cache_key, invalidated, lookup, stored, tags_for

ORDER = json.dumps(
    {
        "order_id": "#W1",
        "user_id": "noah_1",
        "payment_history": [{"payment_method_id": "gift_card_9", "amount": 3}],
    }
)


class TestCache:
    def test_key_ignores_argument_order(self) -> None:
        assert cache_key("t", {"a": 1, "b": 2}) == cache_key("t", {"b": 2, "a": 1})

    def test_tags_come_from_arguments_and_the_result(self) -> None:
        assert tags_for({"order_id": "#W1"}, ORDER) == {
            "order:#W1",
            "user:noah_1",
            "pm:gift_card_9",
        }
        user = json.dumps({"user_id": "u", "payment_methods": {"paypal_1": {}}})
        assert tags_for({"user_id": "u"}, user) == {"user:u", "pm:paypal_1"}

    def test_entries_age_out(self) -> None:
        cache = stored({}, "get_order_details", {"order_id": "#W1"}, ORDER, turn=1)
        assert lookup(cache, "get_order_details", {"order_id": "#W1"}, turn=5, max_age=5) == ORDER
        assert lookup(cache, "get_order_details", {"order_id": "#W1"}, turn=6, max_age=5) is None

    def test_identity_lookups_are_never_cached(self) -> None:
        cache = stored({}, "find_user_id_by_email", {"email": "a@b.c"}, "noah_1", turn=1)
        assert cache == {}

    def test_a_write_drops_only_what_it_touches(self) -> None:
        cache = stored({}, "get_order_details", {"order_id": "#W1"}, ORDER, turn=1)
        cache = stored(cache, "get_product_details", {"product_id": "9"}, "{}", turn=1)
        after_refund_to_card = invalidated(cache, {"pm:gift_card_9"})
        assert list(after_refund_to_card) == [cache_key("get_product_details", {"product_id": "9"})]
        assert invalidated(cache, {"order:#W2"}) == cache

    def test_tools_with_an_effect_are_never_served_from_the_cache(self) -> None:
        for name in ("remember_preference", "find_user_id_by_email"):
            cache = stored({}, name, {"key": "language", "value": "fr"}, "Remembered", turn=1)
            assert cache == {}
            entry = CacheEntry(content="Remembered", tags=[], turn=1)
            assert lookup({cache_key(name, {}): entry}, name, {}, 1, 5) is None
