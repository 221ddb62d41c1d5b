"""What a member of staff does in the console, and a watch on the pages' errors."""

from __future__ import annotations

from playwright.async_api import BrowserContext, ConsoleMessage, Locator, Page, expect

from tests.integration.api_harness import LiveServer


class PageErrors:
    """Uncaught errors and console errors of the pages a test watches."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def watch(self, page: Page, label: str) -> Page:
        page.on("pageerror", lambda error: self.seen.append(f"{label}: {error}"))
        page.on("console", lambda message: self.console(label, message))
        return page

    def console(self, label: str, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.seen.append(f"{label} console: {message.text}")


async def open_console(
    context: BrowserContext,
    server: LiveServer,
    errors: PageErrors,
    *,
    name: str = "Alice",
    staff_id: str = "staff-alice",
) -> Page:
    """A console page, signed in with the demo staff sign-in."""
    console = errors.watch(await context.new_page(), name)
    await console.goto(server.url + "/console")
    await expect(console.get_by_test_id("demo-signin")).to_be_visible()
    await console.get_by_test_id("demo-name").fill(name)
    await console.get_by_test_id("demo-id").fill(staff_id)
    await console.get_by_test_id("demo-signin-button").click()
    await expect(console.get_by_test_id("identity")).to_have_text(f"Signed in as {name}")
    return console


def transcript(console: Page, testid: str) -> Locator:
    return console.get_by_test_id("transcript").get_by_test_id(testid)


async def open_queued(console: Page, summary: str) -> None:
    item = console.get_by_test_id("queue-item").filter(has_text=summary)
    await expect(item).to_have_count(1)
    await item.click()
    await expect(console.get_by_test_id("handoff-summary")).to_contain_text(summary)
