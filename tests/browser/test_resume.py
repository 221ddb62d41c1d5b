"""Runs you can come back to, on the page: it reconnects by itself to an answer whose
connection dropped (no word twice, none missing), Retry follows a run still going, and Stop
ends a long answer keeping what it had written.

The network is cut by a TCP proxy between the page and the app: Chromium's offline emulation
(`context.set_offline`) fails new requests but leaves a response already streaming alone, and
a route cannot pass a body on as it streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page, Route, expect
from psycopg_pool import AsyncConnectionPool

from tests.browser.conftest import SARA, AppServer
from tests.browser.pages import (
    api_get,
    assistant_messages,
    current_thread_id,
    send,
    sign_in,
    user_messages,
    wait_until_idle,
)
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer

# Numbered words: a word repeated or lost shows in the text.
ANSWER = " ".join(f"w{i:02d}" for i in range(1, 61))  # 60 words, ~3 s at 20 a second
LONG = " ".join(f"w{i:03d}" for i in range(1, 201))  # 200 words, ~10 s
PACE = Latency(ttft_ms=50, tokens_per_s=20)
CUT = " …"

# Every text an assistant bubble shows, in order: a MutationObserver's record, so a text shown
# for a moment between two checks of the test is not missed.
WATCH_TEXTS = """
() => {
  window.__texts = [];
  window.__reconnecting = [];
  const log = document.querySelector('[data-testid="message-list"]');
  const note = document.querySelector('[data-testid="reconnecting"]');
  const record = () => {
    for (const b of log.querySelectorAll('[data-testid="message-assistant"] .bubble')) {
      const text = b.textContent;
      if (text && window.__texts.at(-1) !== text) window.__texts.push(text);
    }
  };
  const all = { childList: true, subtree: true, characterData: true };
  new MutationObserver(record).observe(log, all);
  new MutationObserver(() => window.__reconnecting.push(note.textContent)).observe(note, all);
}
"""


class CuttableProxy:
    """A TCP proxy to the app whose connections can all be cut (reset) at once, and which
    refuses new ones while it is down."""

    def __init__(self, port: int) -> None:
        self.target_port = port
        self.down = False
        self.cuts = 0
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def cut(self) -> None:
        """The network goes away: every open connection is reset, new ones refused."""
        self.down = True
        self.cuts += 1
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()
        self._links.clear()

    def restore(self) -> None:
        self.down = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._links.discard(link)
            writer.transport.abort()
            up_writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        if not writer.transport.is_closing():
            writer.write_eof()


@pytest.fixture
async def proxy(app_server: AppServer) -> AsyncIterator[CuttableProxy]:
    p = await CuttableProxy(app_server.port).start()
    yield p
    await p.close()


@pytest.fixture
async def cut_page(
    context: BrowserContext, proxy: CuttableProxy, shop: AsyncConnectionPool[Any]
) -> AsyncIterator[Page]:
    """A fresh page on the app through the proxy; fails the test on any uncaught script error."""
    p = await context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda error: errors.append(str(error)))
    await p.goto(proxy.url + "/")
    yield p
    assert not errors, f"uncaught errors in the page: {errors}"


async def watch(page: Page) -> None:
    await page.evaluate(WATCH_TEXTS)


async def seen_texts(page: Page) -> list[str]:
    return list(await page.evaluate("window.__texts"))


async def runs_of_thread(page: Page) -> list[dict[str, Any]]:
    status, body = await api_get(page, f"/threads/{await current_thread_id(page)}/runs?limit=10")
    assert status == 200, body
    return list(body["items"])


def streaming(page: Page) -> Any:
    return page.locator('[data-testid="message-assistant"][data-streaming]')


async def assert_shown_once(page: Page, answer: str) -> None:
    """The answer streamed as a growing prefix of itself, ended whole, and is on screen."""
    texts = await seen_texts(page)
    assert texts, "no answer was shown"
    bad = [t for t in texts if not answer.startswith(t)]
    assert not bad, f"texts that are not a prefix of the answer (repeated or lost words): {bad}"
    assert texts[-1] == answer, texts[-5:]
    await expect(assistant_messages(page)).to_have_count(1)
    await expect(assistant_messages(page).get_by_test_id("message-text")).to_have_text(answer)


class TestReconnect:
    @pytest.mark.parametrize(
        "offline_s",
        [
            pytest.param(1.0, id="while-the-run-goes-on"),
            pytest.param(4.5, id="after-the-run-has-ended"),
        ],
    )
    async def test_a_dropped_connection_resumes_without_repeating_or_losing_words(
        self,
        cut_page: Page,
        proxy: CuttableProxy,
        model_server: ScriptedModelServer,
        offline_s: float,
    ) -> None:
        page = cut_page
        model_server.use(Script([Reply.say(ANSWER)]), latency=PACE)
        await sign_in(page, SARA)
        await watch(page)
        follows: list[dict[str, str]] = []
        page.on("request", lambda r: follows.append(r.headers) if "/stream" in r.url else None)
        await send(page, "Tell me a long story")
        await expect(streaming(page)).to_contain_text("w05")

        proxy.cut()
        try:
            reconnecting = page.get_by_test_id("reconnecting")
            await expect(reconnecting).to_have_text("Connection lost. Reconnecting…")
            await expect(reconnecting).to_have_attribute("aria-live", "polite")
            await expect(streaming(page)).to_have_count(1)  # the answer so far stays
            await asyncio.sleep(offline_s)
        finally:
            proxy.restore()

        await wait_until_idle(page)
        await expect(page.get_by_test_id("reconnecting")).to_be_hidden()
        await expect(page.get_by_test_id("notice")).to_have_count(0)
        await assert_shown_once(page, ANSWER)
        assert "Connection lost. Reconnecting…" in await page.evaluate("window.__reconnecting")
        # Followed again from the last event seen (not the start), never posted again.
        assert follows, "the run was not followed again"
        assert all(int(h.get("last-event-id", "0")) > 1 for h in follows), follows
        runs = await runs_of_thread(page)
        assert [r["status"] for r in runs] == ["completed"], runs
        await expect(user_messages(page)).to_have_count(1)


class TestRetry:
    async def test_retry_follows_a_run_still_going_instead_of_posting_again(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        """The message reaches the server but its answer never reaches the page: Retry finds
        the run going and shows it from its first event."""
        model_server.use(Script([Reply.say(LONG)]), latency=Latency(ttft_ms=50, tokens_per_s=40))
        await sign_in(page, SARA)
        await watch(page)
        posted: list[asyncio.Task[Any]] = []

        async def lose_the_answer(route: Route) -> None:
            if route.request.method != "POST":
                await route.continue_()
                return
            posted.append(asyncio.create_task(route.fetch(timeout=30_000)))  # the server gets it
            await asyncio.sleep(0.5)
            await route.abort("connectionreset")  # the page does not

        await page.route("**/threads/*/messages", lose_the_answer)
        await send(page, "Tell me a long story")
        notice = page.get_by_test_id("notice")
        await expect(notice).to_be_visible()
        await expect(assistant_messages(page)).to_have_count(0)
        await page.unroute("**/threads/*/messages")
        (run,) = await runs_of_thread(page)
        assert run["status"] == "running", run

        await notice.get_by_test_id("retry").click()
        await expect(streaming(page)).to_contain_text("w010")
        await wait_until_idle(page, timeout_ms=30_000)  # 200 words at 40 a second, from w010
        await assert_shown_once(page, LONG)
        assert [r["status"] for r in await runs_of_thread(page)] == ["completed"]
        await expect(user_messages(page)).to_have_count(1)
        await expect(page.get_by_test_id("composer-input")).to_have_value("")
        for task in posted:
            task.cancel()


class TestStop:
    @pytest.mark.parametrize("how", ["button", "escape"])
    async def test_stop_ends_a_long_answer_and_keeps_what_it_had_written(
        self, page: Page, model_server: ScriptedModelServer, how: str
    ) -> None:
        model_server.use(Script([Reply.say(LONG), Reply.say("Anything else?")]), latency=PACE)
        await sign_in(page, SARA)
        await send(page, "Tell me a long story")
        stop = page.get_by_test_id("stop")
        await expect(stop).to_be_visible()
        await expect(page.get_by_test_id("send")).to_be_hidden()
        await expect(streaming(page)).to_contain_text("w005")
        if how == "button":
            await stop.click()
        else:
            await page.get_by_test_id("composer-input").press("Escape")

        await wait_until_idle(page)
        await expect(stop).to_be_hidden()
        answer = assistant_messages(page).get_by_test_id("message-text")
        await expect(answer).to_have_count(1)
        text = await answer.inner_text()
        assert text.startswith("w001 w002 w003 w004 w005") and text.endswith(CUT), text
        kept = text.removesuffix(CUT)
        assert LONG.startswith(kept) and len(kept) < len(LONG) - 20, text
        runs = await runs_of_thread(page)
        assert [r["status"] for r in runs] == ["cancelled"], runs

        box = page.get_by_test_id("composer-input")
        await expect(box).to_be_editable()
        await expect(box).to_be_focused()
        await send(page, "Thanks")
        await wait_until_idle(page)
        await expect(assistant_messages(page)).to_have_count(2)
        await expect(assistant_messages(page).last).to_have_text("Anything else?")
        # The cut answer stays as it was when the conversation is loaded again.
        await page.reload()
        await expect(assistant_messages(page).first).to_have_text(text)


# Api.follow in the page, against a scripted fetch: the POST's stream breaks after event 3
# (an event half-sent); the first reconnection finds no network, the second a 503, the third
# replays event 3 again (skipped) and 4 and then ends without `done`; the fourth finishes.
FOLLOW = """
async () => {
  const { Api } = await import("/api.js");
  const enc = new TextEncoder();
  const ev = (id, type, data) => `id: ${id}\\nevent: ${type}\\ndata: ${JSON.stringify(data)}\\n\\n`;
  const body = (frames, fail) => new ReadableStream({
    async start(c) {
      for (const f of frames) {
        c.enqueue(enc.encode(f));
        await new Promise((r) => setTimeout(r, 5));
      }
      if (fail) c.error(new TypeError("network error")); else c.close();
    },
  });
  const calls = [];
  const answers = [
    () => new Response(
      body([ev(1, "run", { run_id: "r1", thread_id: "s1" }), ev(2, "token", { text: "a " }),
            ev(3, "token", { text: "b " }), "id: 4\\nevent: tok"], true),
      { headers: { "Content-Location": "/threads/s1/runs/r1" } },
    ),
    () => { throw new TypeError("Failed to fetch"); },
    () => new Response('{"error": {"code": "x", "message": "m"}}', { status: 503 }),
    () => new Response(body([ev(3, "token", { text: "b " }), ev(4, "token", { text: "c " })])),
    () => new Response(body([ev(5, "token", { text: "d" }), ev(6, "done", { status: "x" })])),
  ];
  const realFetch = window.fetch;
  window.fetch = async (path, init) => {
    calls.push([init.method, path, init.headers["Last-Event-ID"] ?? null]);
    return answers[calls.length - 1]();
  };
  try {
    const api = new Api({ token: "t" });
    const cursor = { location: null, lastId: 0 };
    const events = [];
    for await (const e of api.sendMessage("s1", "hi", "c1", { cursor })) {
      events.push([e.type, e.data?.text ?? null]);
    }
    return { events, calls, cursor };
  } finally {
    window.fetch = realFetch;
  }
}
"""


class TestFollowModule:
    async def test_follow_reconnects_with_backoff_from_the_last_event_id(self, page: Page) -> None:
        result = await page.evaluate(FOLLOW)
        assert result["events"] == [
            ["run", None],
            ["token", "a "],
            ["token", "b "],
            ["reconnecting", None],
            ["reconnected", None],
            ["token", "c "],
            ["reconnecting", None],
            ["reconnected", None],
            ["token", "d"],
            ["done", None],
        ]
        stream = ["GET", "/threads/s1/runs/r1/stream"]
        assert result["calls"] == [
            ["POST", "/threads/s1/messages", None],
            [*stream, "3"],
            [*stream, "3"],
            [*stream, "3"],
            [*stream, "4"],
        ]
        assert result["cursor"] == {"location": "/threads/s1/runs/r1", "lastId": 6}
