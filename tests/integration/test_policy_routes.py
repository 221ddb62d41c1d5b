"""The policy routes (issue 42) over real HTTP: who may read, who may change, the gate's
refusals and a forced publish on record, and that no customer can choose a version."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jwt
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.prompts import POLICY
from app.config import Settings
from app.policies import store
from tests.fakellm import ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.policy_harness import MARK, PromptRecorder, reset_policies, say

NOAH = "noah_brown_6181"
LEAD, CLERK = "staff-lead", "staff-clerk"


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    await reset_policies(db)
    async with server.client() as c:
        yield c


def draft_body(text: str = MARK) -> dict[str, Any]:
    return {
        "instructions": POLICY + "\n- " + text,
        "procedures": [
            {"name": "Damaged parcel", "when": "a parcel arrives damaged", "steps": "1. Sorry."}
        ],
        "note": "damaged parcels",
        "parent": 1,
    }


async def create(client: httpx.AsyncClient, server: LiveServer) -> int:
    made = await client.post(
        "/staff/policies", json=draft_body(), headers=server.headers(LEAD, "admin")
    )
    assert made.status_code == 201, made.text
    return int(made.json()["version"])


class TestWhoMay:
    @pytest.mark.parametrize("role,user", [("customer", NOAH), ("guest", "guest-abc")])
    async def test_customers_and_guests_get_404_on_every_policy_route(
        self, client: httpx.AsyncClient, server: LiveServer, role: str, user: str
    ) -> None:
        h = server.headers(user, role)
        for method, path, body in (
            ("GET", "/staff/policies", None),
            ("GET", "/staff/policies/1", None),
            ("POST", "/staff/policies", draft_body()),
            ("POST", "/staff/policies/1/publish", {"percent": 100}),
            ("POST", "/staff/policies/rollback", None),
            ("POST", "/staff/policies/1/tests", {"tasks": [{"x": 1}]}),
        ):
            answer = await client.request(method, path, json=body, headers=h)
            assert answer.status_code == 404, (method, path, answer.text)

    async def test_staff_read_but_cannot_change_admins_can(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        clerk = server.headers(CLERK, "staff")
        listed = await client.get("/staff/policies", headers=clerk)
        assert listed.status_code == 200
        [v1] = listed.json()["items"]
        assert v1["version"] == 1 and v1["state"] == "live" and v1["latest_test"] is None
        assert (await client.get("/staff/policies/1", headers=clerk)).json()["instructions"] == (
            POLICY
        )
        for path, body in (
            ("/staff/policies", draft_body()),
            ("/staff/policies/1/publish", {"percent": 100}),
            ("/staff/policies/rollback", None),
        ):
            refused = await client.post(path, json=body, headers=clerk)
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "admin_only"
        version = await create(client, server)
        one = (await client.get(f"/staff/policies/{version}", headers=clerk)).json()
        assert one["state"] == "draft" and one["created_by"] == LEAD and one["parent"] == 1
        assert one["procedures"][0]["name"] == "Damaged parcel"

    async def test_bad_input_gets_typed_errors(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        admin = server.headers(LEAD, "admin")
        missing = await client.get("/staff/policies/999", headers=admin)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "policy_not_found"
        empty = await client.post("/staff/policies", json={"instructions": ""}, headers=admin)
        assert empty.status_code == 422
        orphan = await client.post(
            "/staff/policies", json={**draft_body(), "parent": 999}, headers=admin
        )
        assert orphan.status_code == 400 and orphan.json()["error"]["code"] == "bad_parent"
        bad_tasks = await client.post(
            "/staff/policies/1/tests", json={"tasks": [{"id": "x"}]}, headers=admin
        )
        assert bad_tasks.status_code == 422 and bad_tasks.json()["error"]["code"] == "bad_tasks"
        assert "Traceback" not in bad_tasks.text
        percent = await client.post("/staff/policies/1/publish", json={"percent": 0}, headers=admin)
        assert percent.status_code == 422


class TestGate:
    async def test_untested_and_regressed_are_refused_and_a_forced_publish_is_recorded(
        self, client: httpx.AsyncClient, server: LiveServer, db: AsyncConnectionPool[Any]
    ) -> None:
        admin = server.headers(LEAD, "admin")
        version = await create(client, server)
        untested = await client.post(
            f"/staff/policies/{version}/publish", json={"percent": 50}, headers=admin
        )
        assert untested.status_code == 409
        assert untested.json()["error"]["code"] == "gate_not_passed"

        await store.start_test(db, "a1", version, 1, LEAD)
        await store.finish_test(db, "a1", "regressed", compare={"regressions": ["t"]})
        regressed = await client.post(
            f"/staff/policies/{version}/publish", json={"percent": 50}, headers=admin
        )
        assert regressed.status_code == 409
        assert "regressed" in regressed.json()["error"]["message"]

        no_reason = await client.post(
            f"/staff/policies/{version}/publish", json={"percent": 50, "force": True}, headers=admin
        )
        assert no_reason.status_code == 422
        forced = await client.post(
            f"/staff/policies/{version}/publish",
            json={"percent": 50, "force": True, "reason": "hotfix for damaged parcels"},
            headers=admin,
        )
        assert forced.status_code == 200, forced.text
        body = forced.json()
        assert body["state"] == "candidate" and body["percent"] == 50
        event = body["events"][-1]
        assert event["action"] == "candidate" and event["forced"] is True
        assert event["actor"] == LEAD and event["reason"] == "hotfix for damaged parcels"
        listed = (await client.get("/staff/policies", headers=admin)).json()["items"]
        assert listed[-1]["latest_test"]["status"] == "regressed"

    async def test_a_passed_test_opens_the_gate_and_100_retires_the_old_live(
        self, client: httpx.AsyncClient, server: LiveServer, db: AsyncConnectionPool[Any]
    ) -> None:
        admin = server.headers(LEAD, "admin")
        version = await create(client, server)
        await store.start_test(db, "b1", version, 1, LEAD)
        await store.finish_test(db, "b1", "passed", compare={"regressions": []}, markdown="# ok")
        test = await client.get(f"/staff/policies/{version}/tests/b1", headers=admin)
        assert test.json()["status"] == "passed" and test.json()["markdown"] == "# ok"
        live = await client.post(
            f"/staff/policies/{version}/publish", json={"percent": 100}, headers=admin
        )
        assert live.status_code == 200 and live.json()["state"] == "live"
        old = (await client.get("/staff/policies/1", headers=admin)).json()
        assert old["state"] == "retired"
        again = await client.post(
            f"/staff/policies/{version}/publish", json={"percent": 100}, headers=admin
        )
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_live"
        back = await client.post("/staff/policies/rollback", headers=admin)
        assert back.json() == {"retired": version, "live": 1}
        nothing = await client.post("/staff/policies/rollback", headers=admin)
        assert nothing.status_code == 200 and nothing.json() == {"retired": 1, "live": version}


class TestCustomersCannotChoose:
    async def test_neither_a_body_field_nor_a_token_claim_picks_a_version(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        model = PromptRecorder()
        scripted_model_session.use(model)
        version = await create(client, server)  # a draft
        secret = server.settings.jwt_secret.get_secret_value()
        now = int(time.time())
        claims = {"sub": NOAH, "role": "customer", "iat": now, "exp": now + 600}
        forged = jwt.encode(
            {**claims, "policy_version": version, "pv": version}, secret, algorithm="HS256"
        )
        h = {"Authorization": f"Bearer {forged}"}
        posted = await client.post(
            "/threads/choose-1/messages",
            json={"content": "hello choose", "policy_version": version},
            headers=h,
        )
        assert posted.status_code in (200, 422)
        if posted.status_code == 200:
            assert all(MARK not in p for p in model.prompts["hello choose"])
            state = (await client.get("/threads/choose-1/state", headers=h)).json()
            assert state["policy_version"] == 1
        await say(client, h, "choose-2", "hello again")
        assert all(MARK not in p for p in model.prompts["hello again"])
        state = (await client.get("/threads/choose-2/state", headers=h)).json()
        assert state["policy_version"] == 1


class TestConcurrentPublishes:
    async def test_two_candidates_published_at_once_one_wins_the_other_gets_409(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        admin = server.headers(LEAD, "admin")
        first, second = await create(client, server), await create(client, server)
        body = {"percent": 30, "force": True, "reason": "race"}
        answers = await asyncio.gather(
            client.post(f"/staff/policies/{first}/publish", json=body, headers=admin),
            client.post(f"/staff/policies/{second}/publish", json=body, headers=admin),
        )
        assert sorted(a.status_code for a in answers) == [200, 409]
        loser = next(a for a in answers if a.status_code == 409)
        assert loser.json()["error"]["code"] in ("candidate_exists", "policy_conflict")
        listed = (await client.get("/staff/policies", headers=admin)).json()["items"]
        assert [v["state"] for v in listed].count("candidate") == 1
