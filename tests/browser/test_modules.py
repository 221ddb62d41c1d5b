"""The page's own modules, run in the browser: the SSE parser and the Markdown renderer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page

from tests.browser.conftest import AppServer

PARSE = """
async ([chunks]) => {
  const { SSEParser } = await import("/sse.js");
  const events = [], comments = [];
  const parser = new SSEParser((e) => events.push(e), (c) => comments.push(c));
  for (const chunk of chunks) parser.feed(chunk);
  parser.end();
  return { events, comments };
}
"""

READ_BYTES = """
async ([chunks]) => {
  const { readEvents } = await import("/sse.js");
  const body = new ReadableStream({
    start(controller) {
      for (const bytes of chunks) controller.enqueue(new Uint8Array(bytes));
      controller.close();
    },
  });
  const events = [];
  for await (const e of readEvents(new Response(body))) events.push(e);
  return events;
}
"""

RENDER = """
async ([source]) => {
  const { renderMarkdown } = await import("/markdown.js");
  const div = document.createElement("div");
  div.append(renderMarkdown(source));
  return div.innerHTML;
}
"""

STREAM = (
    'id: 1\r\nevent: run\r\ndata: {"run_id":"r"}\r\n\r\n'
    ": ping - 2024-01-01 00:00:00\r\n\r\n"
    'id: 2\nevent: token\ndata: {"text":"héllo 👋"}\n\n'
    "event: multi\rdata: one\rdata:  two\rdata\r\r"
    "id: 3\r\nevent: done\r\ndata: {}\r\n\r\n"
)
LINK = 'rel="noopener noreferrer nofollow" target="_blank"'
EXPECTED = [
    {"type": "run", "data": '{"run_id":"r"}', "id": "1"},
    {"type": "token", "data": '{"text":"héllo 👋"}', "id": "2"},
    {"type": "multi", "data": "one\n two\n", "id": "2"},
    {"type": "done", "data": "{}", "id": "3"},
]


@pytest.fixture(scope="module")
async def module_page(shared_context: BrowserContext, app_server: AppServer) -> AsyncIterator[Page]:
    page = await shared_context.new_page()
    await page.goto(app_server.url + "/healthz")
    yield page
    await page.close()


async def parse(page: Page, chunks: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = await page.evaluate(PARSE, [chunks])
    return result


class TestSSEParser:
    async def test_one_chunk(self, module_page: Page) -> None:
        result = await parse(module_page, [STREAM])
        assert result["events"] == EXPECTED
        assert result["comments"] == ["ping - 2024-01-01 00:00:00"]

    async def test_every_split_point_gives_the_same_events(self, module_page: Page) -> None:
        splits = [[STREAM[:i], STREAM[i:]] for i in range(len(STREAM) + 1)]
        results = await module_page.evaluate(
            f"async (splits) => Promise.all(splits.map((chunks) => ({PARSE})([chunks])))", splits
        )
        for i, result in enumerate(results):
            assert result["events"] == EXPECTED, f"split at {i}: {STREAM[:i]!r}"

    async def test_one_character_at_a_time(self, module_page: Page) -> None:
        assert (await parse(module_page, list(STREAM)))["events"] == EXPECTED

    async def test_crlf_split_between_chunks_is_one_line_end(self, module_page: Page) -> None:
        result = await parse(module_page, ["data: a\r", "\ndata: b\r", "\n\r", "\n"])
        assert result["events"] == [{"type": "message", "data": "a\nb", "id": ""}]

    async def test_fields_per_spec(self, module_page: Page) -> None:
        stream = (
            "\ufeffdata:no space\n\n"  # a leading BOM is dropped
            "event: named\nfoo: ignored\nretry: 10\nid: 7\n\n"  # no data: not dispatched
            "data: after\n\n"  # the event type was reset, the id kept
            "id: bad\u0000id\ndata: x\n\n"  # an id with NUL is ignored
            "data: cut off"  # incomplete at the end: discarded
        )
        result = await parse(module_page, [stream])
        assert result["events"] == [
            {"type": "message", "data": "no space", "id": ""},
            {"type": "message", "data": "after", "id": "7"},
            {"type": "message", "data": "x", "id": "7"},
        ]

    async def test_utf8_split_inside_a_character(self, module_page: Page) -> None:
        raw = 'event: token\r\ndata: {"text":"€👋"}\r\n\r\n'.encode()
        cut = raw.index("€".encode()) + 1  # between the bytes of one character
        events = await module_page.evaluate(READ_BYTES, [[list(raw[:cut]), list(raw[cut:])]])
        assert events == [{"type": "token", "data": '{"text":"€👋"}', "id": ""}]


class TestMarkdown:
    @pytest.mark.parametrize(
        ("source", "html"),
        [
            (
                "**bold** and *it* and `co*de*`",
                "<p><strong>bold</strong> and <em>it</em> and <code>co*de*</code></p>",
            ),
            (
                "__b__ _i_ get_order_details 2 * 3 * 4",
                "<p><strong>b</strong> <em>i</em> get_order_details 2 * 3 * 4</p>",
            ),
            ("line one\nline two\n\nnext", "<p>line one<br>line two</p><p>next</p>"),
            ("- a\n- **b**\n  more", "<ul><li>a</li><li><strong>b</strong><br>more</li></ul>"),
            ("3. x\n4. y", '<ol start="3"><li>x</li><li>y</li></ol>'),
            ("- a\n  - nested\n- b", "<ul><li>a<ul><li>nested</li></ul></li><li>b</li></ul>"),
            (
                "```js\nif (a < b) {}\n```",
                '<pre><code class="language-js">if (a &lt; b) {}</code></pre>',
            ),
            ("```\nstill streaming", "<pre><code>still streaming</code></pre>"),
            ("## Title\n> quoted", "<h4>Title</h4><blockquote><p>quoted</p></blockquote>"),
            (
                "[shop](https://example.com/a?b=1&c=2)",
                f'<p><a href="https://example.com/a?b=1&amp;c=2" {LINK}>shop</a></p>',
            ),
            (
                "see https://example.com/x.",
                f'<p>see <a href="https://example.com/x" {LINK}>https://example.com/x</a>.</p>',
            ),
            (
                "[x](javascript:alert(1)) [y](data:text/html,hi) [z](/relative)",
                "<p>[x](javascript:alert(1)) [y](data:text/html,hi) [z](/relative)</p>",
            ),
            ("\\*not italic\\*", "<p>*not italic*</p>"),
            (
                '<img src=x onerror="alert(1)"> <script>alert(1)</script>',
                '<p>&lt;img src=x onerror="alert(1)"&gt; &lt;script&gt;alert(1)&lt;/script&gt;</p>',
            ),
            (
                '**<b onclick="x">hi</b>**',
                '<p><strong>&lt;b onclick="x"&gt;hi&lt;/b&gt;</strong></p>',
            ),
            ("", ""),
        ],
    )
    async def test_renders(self, module_page: Page, source: str, html: str) -> None:
        assert await module_page.evaluate(RENDER, [source]) == html
