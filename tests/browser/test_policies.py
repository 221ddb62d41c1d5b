"""The console's policies page in Chromium (issue 42): an admin writes a draft in the
editor, sees its diff, publishes it to a share past the gate with a reason, and rolls it
back; a member of staff sees the versions but no button that changes them. The analytics
page shows the versions side by side."""

from __future__ import annotations

import re
from typing import Any

from playwright.async_api import BrowserContext, Page, expect
from psycopg_pool import AsyncConnectionPool

from tests.browser.conftest import AppServer
from tests.browser.console_pages import PageErrors
from tests.integration.policy_harness import reset_policies

NEW_RULE = "- Offer a replacement before a refund for a damaged parcel."


async def signed_in(
    context: BrowserContext, server: AppServer, errors: PageErrors, user: str, role: str
) -> Page:
    page = errors.watch(await context.new_page(), user)
    await page.goto(server.url + "/console")
    await page.get_by_test_id("token-input").fill(server.token(user, role))
    await page.get_by_test_id("token-signin").click()
    await expect(page.get_by_test_id("identity")).to_contain_text("Signed in as")
    await page.goto(server.url + "/console/policies")
    await expect(page.get_by_test_id("policies")).to_be_visible()
    return page


class TestPoliciesPage:
    async def test_an_admin_drafts_diffs_publishes_to_a_share_and_rolls_back(
        self,
        staff_context: BrowserContext,
        app_server: AppServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await reset_policies(db)
        errors = PageErrors()
        page = await signed_in(staff_context, app_server, errors, "staff-lead", "admin")
        rows = page.get_by_test_id("version-row")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_have_attribute("data-state", "live")

        editor = page.get_by_test_id("draft-instructions")  # filled from the live version
        await expect(editor).to_have_value(re.compile(r"Verify identity first\. \{identity\}"))
        await editor.fill(await editor.input_value() + "\n" + NEW_RULE)
        await page.get_by_test_id("draft-note").fill("damaged parcels")
        await page.get_by_test_id("draft-create").click()
        await expect(page.get_by_test_id("policies-status")).to_contain_text("created")
        await expect(rows).to_have_count(2)
        draft = rows.filter(has_text="damaged parcels")
        await expect(draft).to_have_attribute("data-state", "draft")
        await expect(draft.get_by_test_id("latest-test")).to_have_text("never tested")
        await expect(page.get_by_test_id("diff")).to_contain_text("+ " + NEW_RULE)

        await draft.get_by_test_id("publish-version").click()
        await page.get_by_test_id("publish-percent").fill("30")
        await page.get_by_test_id("publish-start").click()
        await expect(page.get_by_test_id("policies-status")).to_contain_text("has not been tested")
        await page.get_by_test_id("publish-force").check()
        await page.get_by_test_id("publish-reason").fill("urgent: damaged parcels")
        await page.get_by_test_id("publish-start").click()
        await expect(page.get_by_test_id("policies-status")).to_contain_text(
            "for 30% of new conversations"
        )
        await expect(draft).to_have_attribute("data-state", "candidate")
        await expect(draft).to_contain_text("30%")

        await page.get_by_test_id("rollback").click()
        await expect(draft).to_have_attribute("data-state", "retired")
        await expect(rows.first).to_have_attribute("data-state", "live")

        await page.goto(app_server.url + "/console/analytics")
        await expect(page.get_by_test_id("by-version")).to_be_visible()
        await expect(page.get_by_test_id("version")).to_be_visible()
        # the browser logs the gate's refusal (409) it was shown; nothing else went wrong
        assert [e for e in errors.seen if "409 (Conflict)" not in e] == [], errors.seen

    async def test_staff_see_the_versions_but_nothing_that_changes_them(
        self,
        staff_context: BrowserContext,
        app_server: AppServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await reset_policies(db)
        errors = PageErrors()
        page = await signed_in(staff_context, app_server, errors, "staff-alice", "staff")
        await expect(page.get_by_test_id("version-row")).to_have_count(1)
        for testid in ("rollback", "draft-form", "publish-version", "test-version"):
            await expect(page.get_by_test_id(testid)).to_have_count(0)
        assert not errors.seen, errors.seen
