"""The chat page in Debian's Chromium, against the real app under uvicorn.

The app's model is the real ChatOpenAI pointed at the scripted model server; each test
scripts it with `model_server.use(...)`. To drive the page with another model (the built-in
demo model, say), change `page_model` and `browser_settings`: nothing else depends on it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.domain.models import Product, Variant
from app.help.repository import sync_help_articles
from app.main import STATIC_DIR
from tests import factories as f
from tests.fakellm import ScriptedModelServer
from tests.fakes.fixtures import chat_model
from tests.integration.api_harness import LiveServer

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
TIMEOUT_MS = 10_000

# The shop every browser test starts from.
SARA = "sara_doe_496"
PENDING = "#W0000001"
DELIVERED = "#W0000002"
EVE = "eve_html_777"
EVE_ORDER = "#W0000003"
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=1</script>'


# The same live server the API tests use.
AppServer = LiveServer


@pytest.fixture(scope="session")
def browser_settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, app_env="dev", _env_file=None)


@pytest.fixture(scope="session")
def page_model(scripted_model_session: ScriptedModelServer) -> BaseChatModel | None:
    """The model behind the page; None would mean the app's configured (demo) model."""
    return chat_model(scripted_model_session, streaming=True, timeout=20)


@pytest.fixture(scope="package")
def app_server(browser_settings: Settings, page_model: BaseChatModel | None) -> Iterator[AppServer]:
    """Stopped after the browser tests, not at the session's end: its background workers
    (webhooks, sweeps) poll the tables the integration tests share."""
    if not (STATIC_DIR / "index.html").exists():
        pytest.fail("app/static/index.html is missing: the page is not served")
    server = AppServer(browser_settings, page_model).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: run `make browser-deps` (apt-get install chromium)"
        )
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        await b.close()


def xss_product() -> Product:
    return Product(
        id="9999999999",
        name=XSS,
        variants=(Variant("7000", "9999999999", {"color": XSS}, Decimal("10.00"), True),),
    )


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await seed_shop(db)
    return db


async def seed_shop(db: AsyncConnectionPool[Any]) -> None:
    """Sara with a pending and a delivered order; Eve, whose name and order hold HTML; the
    shipped help articles."""
    bottle, lamp, evil = f.bottle(), f.lamp(), xss_product()
    await f.seed(
        db,
        customers=(
            f.customer(SARA, order_ids=(PENDING, DELIVERED)),
            f.customer(
                EVE,
                first_name="<b>Eve</b>",
                last_name=XSS,
                email="eve@example.com",
                payment_methods=(f.credit_card("credit_card_7777777", "7777"),),
                order_ids=(EVE_ORDER,),
            ),
        ),
        products=(bottle, lamp, evil),
        orders=(
            f.order(PENDING, customer_id=SARA),
            f.order(DELIVERED, customer_id=SARA, status="delivered"),
            f.order(
                EVE_ORDER,
                customer_id=EVE,
                items=(f.item_of(evil, "7000"),),
                paid_with="credit_card_7777777",
            ),
        ),
    )
    await sync_help_articles(db)


@pytest.fixture(scope="session")
async def shared_context(browser: Browser) -> AsyncIterator[BrowserContext]:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(TIMEOUT_MS)
    yield ctx
    await ctx.close()


@pytest.fixture
async def context(shared_context: BrowserContext) -> AsyncIterator[BrowserContext]:
    """One browser context for the session (a new one costs a renderer start); each page
    (tab) still has its own sessionStorage, so tests share nothing but the HTTP cache.
    Pages a test opens are closed after it."""
    yield shared_context
    for p in shared_context.pages:
        await p.close()


@pytest.fixture
async def page(
    context: BrowserContext, app_server: AppServer, shop: AsyncConnectionPool[Any]
) -> AsyncIterator[Page]:
    """A fresh page on the app; fails the test on any uncaught script error."""
    p = await context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda error: errors.append(str(error)))
    await p.goto(app_server.url + "/")
    yield p
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture(scope="session")
def output_dir() -> Path:
    OUTPUT.mkdir(exist_ok=True)
    return OUTPUT


@pytest.fixture
async def staff_context(browser: Browser) -> AsyncIterator[BrowserContext]:
    """A second browser, for the staff console: nothing shared with the customer's pages."""
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(TIMEOUT_MS)
    yield ctx
    await ctx.close()
