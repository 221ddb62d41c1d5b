"""The article page: every piece of article text escaped, simple blocks as HTML."""

from __future__ import annotations

import re
from datetime import date

from app.help.articles import HelpArticle, shipped_articles
from app.help.render import article_page, body_html


def page(title: str = "Title", body: str = "Body") -> str:
    return article_page(HelpArticle("test", title, body, date(2026, 11, 2)))


class TestEscaping:
    def test_script_in_the_body_is_text(self) -> None:
        html = page(body='Hi <script>alert("x")</script> & bye')
        assert "<script" not in html
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; bye" in html

    def test_markup_in_the_title_cannot_close_the_title_or_add_attributes(self) -> None:
        html = page(title='</title><img src=x onerror="alert(1)">')
        assert "<img" not in html
        assert html.count("</title>") == 1
        assert "&lt;/title&gt;&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html

    def test_markup_in_list_items_and_headings_is_escaped(self) -> None:
        html = body_html("## <b>x</b>\n\n- <a href='javascript:x'>y</a>\n1. <i>z</i>")
        assert "<b>" not in html and "<a " not in html and "<i>" not in html
        assert "&lt;a href=&#x27;javascript:x&#x27;&gt;" in html


class TestBlocks:
    def test_paragraphs_join_their_lines_and_split_on_blank_lines(self) -> None:
        assert body_html("one\ntwo\n\nthree") == "<p>one two</p>\n<p>three</p>"

    def test_bullets_and_numbers_become_lists(self) -> None:
        html = body_html("Steps:\n\n1. first\n2. second\n\n- a\n- b")
        assert html == (
            "<p>Steps:</p>\n<ol><li>first</li><li>second</li></ol>\n<ul><li>a</li><li>b</li></ul>"
        )

    def test_a_list_may_follow_a_paragraph_line_directly(self) -> None:
        assert body_html("Pick one:\n- a\n- b") == "<p>Pick one:</p>\n<ul><li>a</li><li>b</li></ul>"

    def test_an_indented_line_continues_a_list_item(self) -> None:
        assert body_html("- long\n  item\n- next") == "<ul><li>long item</li><li>next</li></ul>"

    def test_headings(self) -> None:
        assert body_html("## Refunds\ntext") == "<h2>Refunds</h2>\n<p>text</p>"

    def test_page_shows_title_and_date(self) -> None:
        html = page()
        assert "<h1>Title</h1>" in html
        assert '<time datetime="2026-11-02">2 November 2026</time>' in html

    def test_every_list_line_of_the_shipped_articles_becomes_an_item(self) -> None:
        for article in shipped_articles():
            list_lines = re.findall(r"^(?:- |\d+\. )", article.body, re.MULTILINE)
            assert article_page(article).count("<li>") == len(list_lines), article.id
