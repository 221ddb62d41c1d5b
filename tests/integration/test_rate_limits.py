"""Rate limits and the daily token budget, over real uvicorn servers sharing one Postgres."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.api.ratelimit import client_ip, ip_key, trusted_networks
from app.config import Settings
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.integration.api_harness import LiveServer, live_server

ALICE, BOB = "alice_rate_1", "bob_rate_2"


def settings_for(database_url: str, **values: Any) -> Settings:
    """Admission off: a burst of 60 posts saturates a worker on a busy 2-core machine, and
    admission then sheds a few with 503 overloaded before the limit is consulted (the
    suite saw 3 of 60). That is tests/integration/test_admission.py's subject; this
    module's is the limits."""
    values = {"admit_max_turns": 0, **values}
    return Settings(database_url=database_url, app_env="dev", _env_file=None, **values)  # type: ignore[call-arg]


def answer_ok(_: ChatRequest) -> Reply:
    return Reply.say("ok")


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    """The default limits: what a shop gets without configuring anything."""
    with live_server(settings_for(database_url), scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any], model_server: ScriptedModelServer
) -> AsyncIterator[httpx.AsyncClient]:
    model_server.use(answer_ok)
    async with server.client() as c:
        yield c


def assert_refused(response: httpx.Response, code: str = "rate_limited") -> None:
    assert response.status_code == 429
    assert response.json()["error"]["code"] == code
    assert int(response.headers["retry-after"]) >= 1


async def burst_of(
    requests: list[Awaitable[httpx.Response]],
) -> tuple[list[httpx.Response], float]:
    started = time.monotonic()
    responses = await asyncio.gather(*requests)
    return list(responses), time.monotonic() - started


def assert_burst_then_refused(
    responses: list[httpx.Response], ok: int, burst: int, per_s: float, elapsed_s: float
) -> None:
    """`burst` answered at once, plus what the limit refilled while the burst was sent
    (a slow machine takes more than a second for it); every other answer a 429."""
    statuses = Counter(r.status_code for r in responses)
    refilled = math.ceil(elapsed_s * per_s)
    assert burst <= statuses[ok] <= burst + refilled, (statuses, elapsed_s)
    assert statuses[429] == len(responses) - statuses[ok], statuses
    for refused in (r for r in responses if r.status_code == 429):
        assert_refused(refused)


async def metric(client: httpx.AsyncClient, limit: str) -> float:
    text = (await client.get("/metrics")).text
    line = f'cs_agent_rate_limited_total{{limit="{limit}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


async def post(
    client: httpx.AsyncClient, server: LiveServer, user: str, session: str
) -> httpx.Response:
    return await client.post(
        f"/threads/{session}/messages", json={"content": "hi"}, headers=server.headers(user)
    )


class TestMessagePosts:
    async def test_60_posts_within_a_second_from_one_user_meet_429s_and_cost_no_model_calls(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        limits = server.settings
        burst, per_s = limits.rate_limit_posts_burst, limits.rate_limit_posts_per_minute / 60
        refusals = await metric(client, "posts")
        responses, elapsed = await burst_of(
            [post(client, server, ALICE, f"s{i}") for i in range(60)]
        )
        assert_burst_then_refused(responses, 200, burst, per_s, elapsed)
        accepted = sum(r.status_code == 200 for r in responses)
        assert len(model_server.requests) == accepted  # refused posts never reach the model
        assert await metric(client, "posts") == refusals + 60 - accepted
        # another customer is not held back by Alice's burst
        assert (await post(client, server, BOB, "b1")).status_code == 200

    async def test_resume_counts_against_the_same_limit(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        burst = server.settings.rate_limit_posts_burst
        await asyncio.gather(*(post(client, server, ALICE, f"s{i}") for i in range(burst)))
        resumed = await client.post(
            "/threads/s0/resume", json={"decision": "approve"}, headers=server.headers(ALICE)
        )
        assert_refused(resumed)

    async def test_the_limit_holds_across_replicas(
        self,
        database_url: str,
        scripted_model_session: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
        model_server: ScriptedModelServer,
    ) -> None:
        model_server.use(answer_ok)
        settings = settings_for(database_url, rate_limit_posts_burst=6)
        with (
            live_server(settings, scripted_model_session) as one,
            live_server(settings, scripted_model_session) as two,
        ):
            async with one.client() as a, two.client() as b:
                responses, elapsed = await burst_of(
                    [post(a if i % 2 else b, one, ALICE, f"r{i}") for i in range(20)]
                )
        per_s = settings.rate_limit_posts_per_minute / 60
        assert_burst_then_refused(responses, 200, 6, per_s, elapsed)


class TestTokenBudget:
    async def test_a_user_past_the_days_budget_is_refused_before_the_turn_starts(
        self,
        database_url: str,
        scripted_model_session: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
        model_server: ScriptedModelServer,
    ) -> None:
        model_server.use(answer_ok)
        # One turn of the scripted model reads the tools' schemas: well over 100 tokens.
        settings = settings_for(database_url, token_budget_per_day=100)
        with live_server(settings, scripted_model_session) as live:
            async with live.client() as c:
                assert (await post(c, live, ALICE, "t1")).status_code == 200
                calls = len(model_server.requests)
                refused = await post(c, live, ALICE, "t2")
                assert_refused(refused, "token_budget_exhausted")
                assert int(refused.headers["retry-after"]) <= 86_400
                assert len(model_server.requests) == calls
                # deleting the thread does not give the tokens back
                deleted = await c.delete("/threads/t1", headers=live.headers(ALICE))
                assert deleted.status_code == 204
                assert_refused(await post(c, live, ALICE, "t3"), "token_budget_exhausted")
                assert (await post(c, live, BOB, "t1")).status_code == 200
                assert await metric(c, "token_budget") == 2


class TestThreadCreation:
    async def test_200_thread_creations_within_a_second_meet_429s(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        limits = server.settings
        burst, per_s = limits.rate_limit_threads_burst, limits.rate_limit_threads_per_hour / 3600
        headers = server.headers(ALICE)
        refusals = await metric(client, "threads")
        responses, elapsed = await burst_of(
            [client.post("/threads", headers=headers) for _ in range(200)]
        )
        assert_burst_then_refused(responses, 201, burst, per_s, elapsed)
        refused = sum(r.status_code == 429 for r in responses)
        assert await metric(client, "threads") == refusals + refused


class TestUnauthenticated:
    async def test_200_help_searches_within_a_second_from_one_ip_meet_429s(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        limits = server.settings
        burst, per_s = limits.rate_limit_public_burst, limits.rate_limit_public_per_minute / 60
        refusals = await metric(client, "public")
        responses, elapsed = await burst_of(
            [client.get("/help", params={"q": "refund"}) for _ in range(200)]
        )
        assert_burst_then_refused(responses, 200, burst, per_s, elapsed)
        refused = sum(r.status_code == 429 for r in responses)
        assert await metric(client, "public") == refusals + refused

    async def test_300_bad_tokens_from_one_ip_turn_into_429s(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        limits = server.settings
        burst, per_s = limits.rate_limit_auth_burst, limits.rate_limit_auth_per_minute / 60
        bad = {"Authorization": "Bearer not-a-jwt"}
        refusals = await metric(client, "auth")
        responses, elapsed = await burst_of(
            [client.get("/threads", headers=bad) for _ in range(300)]
        )
        assert_burst_then_refused(responses, 401, burst, per_s, elapsed)
        # a valid token from the same address still works: only failures are counted
        assert (await client.get("/threads", headers=server.headers(ALICE))).status_code == 200
        refused = sum(r.status_code == 429 for r in responses)
        assert await metric(client, "auth") == refusals + refused

    async def test_100_guest_mints_from_one_ip_meet_429s(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        limits = server.settings
        burst, per_s = limits.rate_limit_auth_burst, limits.rate_limit_auth_per_minute / 60
        responses, elapsed = await burst_of(
            [client.post("/auth/demo", json={"role": "guest"}) for _ in range(100)]
        )
        assert_burst_then_refused(responses, 200, burst, per_s, elapsed)


class TestClientAddress:
    async def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        burst = server.settings.rate_limit_auth_burst
        responses = [
            await client.get(
                "/threads",
                headers={"Authorization": "Bearer x", "X-Forwarded-For": f"203.0.113.{i}"},
            )
            for i in range(burst + 5)
        ]
        assert Counter(r.status_code for r in responses) == {401: burst, 429: 5}

    async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limit(
        self,
        database_url: str,
        scripted_model_session: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        settings = settings_for(database_url, trusted_proxies="127.0.0.1")
        with live_server(settings, scripted_model_session) as live:
            async with live.client() as c:
                spread = [
                    await c.get(
                        "/threads",
                        headers={"Authorization": "Bearer x", "X-Forwarded-For": f"203.0.113.{i}"},
                    )
                    for i in range(settings.rate_limit_auth_burst + 5)
                ]
                one = [
                    await c.get(
                        "/threads",
                        headers={"Authorization": "Bearer x", "X-Forwarded-For": "198.51.100.7"},
                    )
                    for _ in range(settings.rate_limit_auth_burst + 1)
                ]
        assert {r.status_code for r in spread} == {401}
        assert one[-1].status_code == 429

    def test_the_client_is_the_nearest_untrusted_forwarded_address(self) -> None:
        proxies = trusted_networks("10.0.0.0/8, 127.0.0.1")
        assert client_ip("10.1.2.3", "6.6.6.6, 198.51.100.7, 10.9.9.9", proxies) == "198.51.100.7"
        assert client_ip("192.0.2.1", "198.51.100.7", proxies) == "192.0.2.1"  # untrusted peer
        assert client_ip("127.0.0.1", "garbage, 198.51.100.7", proxies) == "198.51.100.7"
        assert client_ip("10.1.2.3", None, proxies) == "10.1.2.3"
        assert client_ip("10.1.2.3", "198.51.100.7", ()) == "10.1.2.3"

    def test_ipv6_clients_share_a_limit_per_64(self) -> None:
        assert ip_key("2001:db8:1:2::1") == ip_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
        assert ip_key("::ffff:192.0.2.1") == "192.0.2.1"
        assert ip_key("192.0.2.1") == "192.0.2.1"
