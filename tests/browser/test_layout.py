"""Phone width, keyboard use, and the hooks assistive technology relies on."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import BrowserContext, Page, ViewportSize, expect

from tests.browser.conftest import PENDING, SARA, AppServer
from tests.browser.pages import ask, assistant_messages, sign_in
from tests.fakellm import Reply, Script, ScriptedModelServer

PHONE: ViewportSize = {"width": 390, "height": 844}


class TestPhoneWidth:
    async def test_sidebar_collapses_into_a_drawer(
        self,
        context: BrowserContext,
        app_server: AppServer,
        shop: object,
        model_server: ScriptedModelServer,
        output_dir: Path,
    ) -> None:
        page = await context.new_page()
        await page.set_viewport_size(PHONE)
        await page.emulate_media(reduced_motion="reduce")  # no slide-in: steady screenshots
        await page.goto(app_server.url + "/")
        await sign_in(page, SARA)
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING), Reply.say("It is pending.")])
        )
        await ask(page, f"Where is {PENDING}?")
        await expect(assistant_messages(page)).to_have_text("It is pending.")

        sidebar = page.get_by_test_id("sidebar")
        toggle = page.get_by_test_id("toggle-sidebar")
        await expect(sidebar).to_be_hidden()
        await expect(page.get_by_test_id("composer-input")).to_be_visible()
        assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        await page.screenshot(path=str(output_dir / "phone-view.png"))

        await toggle.click()
        await expect(sidebar).to_be_visible()
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        await page.screenshot(path=str(output_dir / "phone-sidebar.png"))
        await page.keyboard.press("Escape")
        await expect(sidebar).to_be_hidden()

        await toggle.click()
        await page.get_by_test_id("new-thread").click()
        await expect(sidebar).to_be_hidden()
        await expect(page.get_by_test_id("empty-state")).to_be_visible()

    async def test_wide_screen_shows_the_sidebar_without_a_toggle(self, page: Page) -> None:
        await sign_in(page, SARA)
        await expect(page.get_by_test_id("sidebar")).to_be_visible()
        await expect(page.get_by_test_id("toggle-sidebar")).to_be_hidden()


class TestKeyboardAndAccessibility:
    async def test_sign_in_and_send_by_keyboard_alone(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hello, guest.")]))
        guest = page.get_by_test_id("signin-guest")
        await expect(guest).to_be_visible()
        for _ in range(10):
            if await guest.evaluate("el => el === document.activeElement"):
                break
            await page.keyboard.press("Tab")
        await expect(guest).to_be_focused()
        await page.keyboard.press("Enter")
        box = page.get_by_test_id("composer-input")
        await expect(box).to_be_focused()
        await page.keyboard.type("hi")
        await page.keyboard.press("Enter")
        await expect(assistant_messages(page)).to_have_text("Hello, guest.")

    async def test_live_region_and_real_buttons(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [Reply.call("cancel_pending_order", order_id=PENDING, reason="no longer needed")]
            )
        )
        await sign_in(page, SARA)
        await ask(page, "cancel it")
        log = page.get_by_test_id("message-list")
        await expect(log).to_have_attribute("aria-live", "polite")
        await expect(log).to_have_attribute("role", "log")
        await page.get_by_test_id("toggle-debug").click()
        await expect(page.get_by_test_id("checkpoint").first).to_be_visible()
        controls = [
            "approve", "decline", "edit-message", "thread-item", "new-thread", "send",
            "toggle-debug", "rewind-checkpoint", "debug-close", "sign-out", "toggle-sidebar",
        ]  # fmt: skip
        for testid in controls:
            tags = await page.get_by_test_id(testid).evaluate_all("els => els.map(e => e.tagName)")
            assert tags and set(tags) == {"BUTTON"}, (testid, tags)
        assert await page.locator("[onclick], [onerror], a[href^='javascript']").count() == 0
