"""The tool-result cache: keys, tags, ageing and invalidation (pure functions)."""

from __future__ import annotations

from app.agent.cache import cache_key, invalidated, lookup, stored, tags_of
from app.tools.registry import SPECS
from app.tools.results import Artifact

ORDER = Artifact(
    outcome="ok",
    ids={"order": ["#W1"], "customer": ["noah_1"], "payment_method": ["gift_card_9"]},
    cacheable=True,
    cache="miss",
)
PRODUCT = Artifact(outcome="ok", ids={"product": ["9"]}, cacheable=True)


class TestCache:
    def test_key_ignores_argument_order(self) -> None:
        assert cache_key("t", {"a": 1, "b": 2}) == cache_key("t", {"b": 2, "a": 1})

    def test_tags_are_the_ids_the_artifact_names(self) -> None:
        assert tags_of(ORDER["ids"]) == {"order:#W1", "user:noah_1", "pm:gift_card_9"}
        assert tags_of({"article": ["refunds"]}) == set()  # nothing a write changes

    def test_entries_age_out(self) -> None:
        cache = stored({}, "get_order_details", {"order_id": "#W1"}, "Order #W1", ORDER, turn=1)
        hit = lookup(cache, "get_order_details", {"order_id": "#W1"}, turn=5, max_age=5)
        assert hit is not None and hit["content"] == "Order #W1"
        assert lookup(cache, "get_order_details", {"order_id": "#W1"}, turn=6, max_age=5) is None

    def test_an_entry_keeps_the_artifact_without_the_cache_mark(self) -> None:
        cache = stored({}, "get_order_details", {"order_id": "#W1"}, "Order #W1", ORDER, turn=1)
        (entry,) = cache.values()
        assert entry["artifact"]["ids"] == ORDER["ids"]
        assert "cache" not in entry["artifact"]
        assert entry["tags"] == ["order:#W1", "pm:gift_card_9", "user:noah_1"]

    def test_a_write_drops_only_what_it_touches(self) -> None:
        cache = stored({}, "get_order_details", {"order_id": "#W1"}, "o", ORDER, turn=1)
        cache = stored(cache, "get_product_details", {"product_id": "9"}, "p", PRODUCT, turn=1)
        after_refund_to_card = invalidated(cache, {"pm:gift_card_9"})
        assert list(after_refund_to_card) == [cache_key("get_product_details", {"product_id": "9"})]
        assert invalidated(cache, {"order:#W2"}) == cache

    def test_tools_with_an_effect_are_declared_uncacheable(self) -> None:
        effects = ("remember_preference", "find_user_id_by_email", "find_user_id_by_name_zip")
        assert not any(SPECS[name].cacheable for name in (*effects, "confirm_identity"))
        assert not any(s.cacheable for s in SPECS.values() if s.access == "write")
        assert SPECS["get_order_details"].cacheable
