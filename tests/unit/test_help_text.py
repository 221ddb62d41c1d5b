"""Shortening help text: search snippets (300 characters) and article bodies for the model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.help.search import MAX_SNIPPET_CHARS, clip_snippet
from app.tools.help import MAX_BODY_CHARS, cut_body


class TestClipSnippet:
    def test_short_text_is_flattened_to_one_line(self) -> None:
        assert (
            clip_snippet("Refunds:\n\n- gift card:  immediate") == "Refunds: - gift card: immediate"
        )

    def test_long_text_is_cut_at_a_word_with_an_ellipsis(self) -> None:
        snippet = clip_snippet("refund " * 100)
        assert len(snippet) <= MAX_SNIPPET_CHARS
        assert snippet.endswith("refund…")

    @given(st.text(max_size=2000))
    def test_never_longer_than_300(self, text: str) -> None:
        assert len(clip_snippet(text)) <= MAX_SNIPPET_CHARS

    def test_one_long_word_is_cut_inside_it(self) -> None:
        assert clip_snippet("x" * 500) == "x" * (MAX_SNIPPET_CHARS - 1) + "…"


class TestCutBody:
    def test_cut_at_the_last_paragraph_break_before_the_limit(self) -> None:
        body = "a" * 1600 + "\n\n" + "b" * 600
        assert cut_body(body) == "a" * 1600

    def test_cut_at_a_word_when_no_paragraph_ends_near_the_limit(self) -> None:
        body = "word " * 1000
        cut = cut_body(body)
        assert len(cut) <= MAX_BODY_CHARS and cut.endswith("word")
        assert len(cut) > MAX_BODY_CHARS - 10

    @given(st.text(min_size=MAX_BODY_CHARS + 1, max_size=3000))
    def test_never_longer_than_the_limit(self, body: str) -> None:
        assert len(cut_body(body)) <= MAX_BODY_CHARS
