"""The console's analytics page in Chromium: conversations through the real service (the
scripted model), the outcome sweep, then the page's charts (a screenshot of each must hold
the series' colours, not only axes and grid) and the flagged table, whose link opens the
conversation in the console."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from playwright.async_api import BrowserContext, Page, expect
from playwright.async_api import Error as PlaywrightError
from psycopg_pool import AsyncConnectionPool

from app.analytics.sweep import SweepPolicy, sweep
from app.config import Settings
from app.db.migrate import migrate
from app.db.pool import open_pool
from tests.browser.conftest import OUTPUT, PENDING, SARA, AppServer, seed_shop
from tests.browser.console_pages import PageErrors, open_console, transcript
from tests.conftest import DOMAIN_TABLES
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.pg import create_fresh_database, drop_database

# The page counts every conversation in its database: these tests have a database and a
# server of their own, so conversations other browser tests leave (a handoff finishing
# after its test) never reach their tables.


@pytest.fixture(scope="module")
def own_database() -> Iterator[str]:
    url, admin = create_fresh_database("csagent_analytics")
    asyncio.run(migrate(url))
    yield url
    drop_database(admin, url)


@pytest.fixture(scope="module")
def app_server(own_database: str, page_model: BaseChatModel | None) -> Iterator[AppServer]:
    settings = Settings(database_url=own_database, app_env="dev", _env_file=None)
    server = AppServer(settings, page_model).start()
    yield server
    server.stop()


@pytest.fixture
async def shop(own_database: str, app_server: AppServer) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool = await open_pool(own_database, app_server.settings, name="analytics-test")
    async with pool.connection() as conn:
        await conn.execute(f"TRUNCATE {DOMAIN_TABLES} RESTART IDENTITY CASCADE")
    await seed_shop(pool)
    yield pool
    await pool.close()


CHARTS = ("chart-results", "chart-rates", "chart-tools", "chart-cost", "chart-ttft")
# Counts the pixels of a PNG (a screenshot, as a data URL) that are strongly coloured: the
# series are; the background, axes, labels and grid are white, black or grey.
COLOURED_PIXELS = """
async (url) => {
  const img = new Image();
  img.src = url;
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.width;
  canvas.height = img.height;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const { data } = ctx.getImageData(0, 0, img.width, img.height);
  let coloured = 0;
  for (let i = 0; i < data.length; i += 4) {
    const [r, g, b] = [data[i], data[i + 1], data[i + 2]];
    if (Math.max(r, g, b) - Math.min(r, g, b) > 80) coloured += 1;
  }
  return { coloured, total: data.length / 4 };
}
"""


async def post(server: AppServer, session: str, content: str, resume: str | None = None) -> str:
    async with server.client() as client:
        if resume:
            r = await client.post(
                f"/threads/{session}/resume",
                json={"decision": resume},
                headers=server.headers(SARA),
            )
        else:
            r = await client.post(
                f"/threads/{session}/messages",
                json={"content": content},
                headers=server.headers(SARA),
            )
    assert r.status_code == 200, r.text
    status: str = r.json()["status"]
    return status


async def a_few_conversations(server: AppServer, model: ScriptedModelServer) -> None:
    model.use(Script([Reply.say("Your order ships tomorrow.")]))
    await post(server, "fine", "when does my order ship?")
    model.use(
        Script(
            [
                Reply.call("cancel_pending_order", order_id=PENDING, reason="ordered by mistake"),
                Reply.say("All right, I left the order as it is."),
            ]
        )
    )
    assert await post(server, "declined", "cancel my order please") == "interrupted"
    await post(server, "declined", "", resume="reject")
    model.use(
        Script(
            [
                Reply.call("get_order_details", order_id="#W9999999"),
                Reply.call("get_order_details", order_id="#W9999999"),
                Reply.say("I could not find that order."),
            ]
        )
    )
    await post(server, "failing", "where is order #W9999999?")


async def a_day_earlier(pool: AsyncConnectionPool[Any], session: str, days: int = 1) -> None:
    """Move a conversation to yesterday, so the charts have two days to draw lines between."""
    thread_id = f"{SARA}:{session}"
    async with pool.connection() as conn:
        await conn.execute(
            """UPDATE threads SET created_at = created_at - make_interval(days => %s),
                   updated_at = updated_at - make_interval(days => %s) WHERE thread_id = %s""",
            (days, days, thread_id),
        )
        await conn.execute(
            """UPDATE runs SET created_at = created_at - make_interval(days => %s),
                   finished_at = finished_at - make_interval(days => %s) WHERE thread_id = %s""",
            (days, days, thread_id),
        )


async def coloured_pixels(page: Page, testid: str) -> dict[str, int]:
    """In a screenshot of the chart's canvas alone (the legend's coloured keys are HTML
    beside it), the pixels of the series' colours."""
    chart = page.get_by_test_id(testid).locator("canvas")
    for attempt in range(3):
        try:
            png = await chart.screenshot(path=str(OUTPUT / f"analytics-{testid}.png"))
            break
        except PlaywrightError as error:
            # A resize (a scrollbar appearing) redraws the charts: a canvas found just before
            # is replaced by a new one. Take the new one.
            if "not attached" not in str(error) or attempt == 2:
                raise
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    counted: dict[str, int] = await page.evaluate(COLOURED_PIXELS, url)
    return counted


class TestAnalyticsPage:
    async def test_the_charts_show_the_data_and_a_flagged_row_opens_its_transcript(
        self,
        staff_context: BrowserContext,
        app_server: AppServer,
        shop: AsyncConnectionPool[Any],
        model_server: ScriptedModelServer,
        output_dir: Any,
    ) -> None:
        await a_few_conversations(app_server, model_server)
        await a_day_earlier(shop, "declined")
        swept = await sweep(shop, SweepPolicy.from_settings(app_server.settings, idle_min=0))
        assert swept is not None and swept.outcomes == 3
        errors = PageErrors()
        console = await open_console(staff_context, app_server, errors)
        await console.get_by_test_id("analytics-link").click()
        await expect(console).to_have_url(app_server.url + "/console/analytics")
        await expect(console.get_by_test_id("analytics")).to_be_visible()

        totals = console.get_by_test_id("totals")
        await expect(totals).to_contain_text("Conversations3")
        # Why a conversation of a minute ago is not counted yet (the server's defaults).
        await expect(console.get_by_test_id("analytics-when")).to_have_text(
            "Conversations appear here 30 minutes after they go quiet (a handed-off one at "
            "once), at the next sweep (every 5 minutes)."
        )
        await console.get_by_test_id("range").select_option("7")  # the two days further apart
        await expect(console.get_by_test_id("analytics")).to_have_attribute("data-drawn", "7d")
        for testid in CHARTS:
            await expect(console.get_by_test_id(testid).locator("canvas")).to_have_count(1)
        await console.screenshot(path=str(output_dir / "analytics.png"), full_page=True)
        for testid in CHARTS:
            counted = await coloured_pixels(console, testid)
            assert counted["coloured"] > 100, (testid, counted)
        # The tool chart names its tools on the axis (drawn on the canvas: the legend
        # carries the series).
        await expect(console.get_by_test_id("chart-tools")).to_contain_text("error rate")

        rows = console.get_by_test_id("flagged-row")
        await expect(rows).to_have_count(2)  # the fine conversation has no flag
        declined = rows.filter(has_text="declined_write")
        await expect(declined).to_contain_text("The customer declined cancel_pending_order")
        await expect(rows.filter(has_text="repeated_tool_error")).to_have_count(1)
        await console.get_by_test_id("flag-filter").select_option("repeated_tool_error")
        await expect(rows).to_have_count(1)
        await expect(rows).to_contain_text(f"{SARA}:failing")
        await console.get_by_test_id("flag-filter").select_option("")
        await expect(rows).to_have_count(2)

        await declined.get_by_test_id("open-transcript").click()
        await expect(console).to_have_url(app_server.url + f"/console#thread={SARA}%3Adeclined")
        await expect(console.get_by_test_id("conversation")).to_be_visible()
        await expect(
            transcript(console, "transcript-customer").filter(has_text="cancel my order please")
        ).to_have_count(1)
        assert not errors.seen, errors.seen

    async def test_the_flagged_table_follows_the_chosen_range(
        self,
        staff_context: BrowserContext,
        app_server: AppServer,
        shop: AsyncConnectionPool[Any],
        model_server: ScriptedModelServer,
    ) -> None:
        await a_few_conversations(app_server, model_server)
        await a_day_earlier(shop, "failing", days=10)  # in the last 30 days, not the last 7
        swept = await sweep(shop, SweepPolicy.from_settings(app_server.settings, idle_min=0))
        assert swept is not None and swept.outcomes == 3
        errors = PageErrors()
        console = await open_console(staff_context, app_server, errors)
        await console.goto(app_server.url + "/console/analytics")
        rows = console.get_by_test_id("flagged-row")

        await expect(console.get_by_test_id("totals")).to_contain_text("Conversations3")
        await expect(rows).to_have_count(2)  # the last 30 days
        await console.get_by_test_id("range").select_option("7")
        await expect(console.get_by_test_id("totals")).to_contain_text("Conversations2")
        await expect(rows).to_have_count(1)
        await expect(rows).to_contain_text(f"{SARA}:declined")
        await console.get_by_test_id("flag-filter").select_option("repeated_tool_error")
        await expect(console.get_by_test_id("flagged-empty")).to_be_visible()
        assert not errors.seen, errors.seen

    async def test_without_a_staff_session_the_page_says_where_to_sign_in(
        self, staff_context: BrowserContext, app_server: AppServer
    ) -> None:
        errors = PageErrors()
        page = errors.watch(await staff_context.new_page(), "analytics")
        response = await page.goto(app_server.url + "/console/analytics")

        assert response is not None and response.ok
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        status = page.get_by_test_id("analytics-status")
        await expect(status).to_contain_text("Sign in on the console first")
        await expect(status.get_by_role("link")).to_have_attribute("href", "/console")
        await expect(page.get_by_test_id("analytics")).to_be_hidden()
        assert not errors.seen, errors.seen
