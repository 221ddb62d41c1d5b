from __future__ import annotations

import pytest

from app.threads.ids import InvalidThreadId, thread_id


class TestThreadIds:
    def test_joins_validated_parts(self) -> None:
        assert thread_id("noah_brown_6181", "s-1") == "noah_brown_6181:s-1"
        assert thread_id("a.b@c", "d_e") == "a.b@c:d_e"

    @pytest.mark.parametrize(
        ("user", "session"),
        [
            ("a:b", "c"),  # a colon would let two pairs collide
            ("a", "b:c"),
            ("", "s"),
            ("u", ""),
            ("u" * 129, "s"),
            ("u", "s" * 65),
            ("u", "s.t"),  # session ids take no dots
            ("ü", "s"),
            ("u", "s/../x"),
        ],
    )
    def test_rejects_ambiguous_or_malformed_parts(self, user: str, session: str) -> None:
        with pytest.raises(InvalidThreadId):
            thread_id(user, session)

    def test_distinct_pairs_never_share_an_id(self) -> None:
        pairs = [("a", "b-c"), ("a-b", "c"), ("a_b", "c"), ("a", "b_c")]
        assert len({thread_id(u, s) for u, s in pairs}) == len(pairs)
