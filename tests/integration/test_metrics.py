"""GET /metrics: prometheus-client's registry in one process, every worker's values added up
under `serve --workers N`; the instruments a turn feeds; labels that stay bounded."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool import AsyncConnectionPool

from app.api.auth import issue_token
from app.config import Settings
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.faults.procs import ServiceProcess
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"
SHIPPING = "how much is shipping for 2 kg over 300 km?"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def total(text: str, name: str) -> float:
    return sum(v for (n, _), v in samples(text).items() if n == name)


def runs_by_worker(folder: Path) -> dict[int, float]:
    """Completed runs each worker wrote to its own file in the multi-process folder."""
    out: dict[int, float] = {}
    for path in folder.glob("counter_*.db"):
        pid = int(path.stem.removeprefix("counter_"))
        families = MultiProcessCollector.merge([str(path)], accumulate=False)  # type: ignore[no-untyped-call]
        out[pid] = sum(
            s.value
            for f in families
            for s in f.samples
            if s.name == "cs_agent_runs_total" and s.labels.get("status") == "completed"
        )
    return out


class TestManyWorkers:
    def test_every_scrape_counts_the_turns_of_both_workers(
        self, database_url: str, tmp_path: Path
    ) -> None:
        folder = tmp_path / "prometheus"
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"a stale file of an earlier service")
        secret = secrets.token_urlsafe(32)
        env = {
            "DATABASE_URL": database_url,
            "JWT_SECRET": secret,
            "PROMETHEUS_MULTIPROC_DIR": str(folder),
            "LLM_PROVIDER": "demo",
            "DEMO_MODEL_TOKENS_PER_S": "5000",
            "RATE_LIMIT_POSTS_PER_MINUTE": "0",
            "LOG_LEVEL": "WARNING",
        }
        service = ServiceProcess(env, args=("--workers", "2"))
        try:
            service.start(timeout_s=180)  # two workers each import the app: slow when loaded
            assert not (folder / "counter_1.db").exists()  # emptied before the workers started

            def turn(i: int) -> None:
                token = issue_token(secret, f"guest-metrics-{i}", role="guest")
                r = httpx.post(  # a connection of its own: either worker may accept it
                    f"{service.url}/threads/m{i}/messages",
                    json={"content": SHIPPING},
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=60,
                )
                assert r.status_code == 200 and r.json()["status"] == "completed", r.text

            turns = 0
            with ThreadPoolExecutor(4) as pool:
                # Until both workers have run turns (the kernel picks who accepts), 8 at least.
                while turns < 8 or sum(n > 0 for n in runs_by_worker(folder).values()) < 2:
                    assert turns < 64, runs_by_worker(folder)
                    list(pool.map(turn, range(turns, turns + 4)))
                    turns += 4

            assert sum(runs_by_worker(folder).values()) == turns
            for _ in range(6):  # whichever worker answers, the totals are the service's
                text = httpx.get(f"{service.url}/metrics", timeout=10).text
                assert value(text, "cs_agent_runs_total", status="completed") == turns
                assert value(text, "cs_agent_run_duration_seconds_count") == turns
                assert value(text, "cs_agent_lock_wait_seconds_count") == turns
                assert value(text, "cs_agent_time_to_first_token_seconds_count") == turns
                assert value(text, "cs_agent_model_call_duration_seconds_count") == 2 * turns
                tool = "calc_shipping"
                assert value(text, "cs_agent_tool_duration_seconds_count", tool=tool) == turns
                assert value(text, "cs_agent_tool_results_total", status="ok") == turns
                assert value(text, "cs_agent_model_tokens_total", direction="output", model="demo")
                assert value(text, "cs_agent_active_runs") == 0
                assert "cs_agent_db_pool_connections_in_use" in text
        finally:
            service.cleanup()


# -- one process ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, app_env="dev", _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def scrape(client: httpx.AsyncClient) -> str:
    r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text


class TestOneProcess:
    async def test_a_confirmed_write_feeds_every_instrument_of_its_turns(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        before = await scrape(client)
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say("Done: it is cancelled."),
                ]
            )
        )
        h = server.headers(NOAH)
        r = await client.post("/threads/mw/messages", json={"content": "cancel it"}, headers=h)
        assert r.json()["status"] == "interrupted"
        r = await client.post("/threads/mw/resume", json={"decision": "approve"}, headers=h)
        assert r.json()["status"] == "completed"
        after = await scrape(client)

        def grew(name: str, by: float, **labels: str) -> None:
            assert value(after, name, **labels) - value(before, name, **labels) == by, name

        grew("cs_agent_runs_total", 1, status="interrupted")
        grew("cs_agent_runs_total", 1, status="completed")
        grew("cs_agent_run_duration_seconds_count", 2)
        grew("cs_agent_lock_wait_seconds_count", 2)
        grew("cs_agent_model_call_duration_seconds_count", 3)
        grew("cs_agent_time_to_first_token_seconds_count", 1)  # the first run streamed no text
        grew("cs_agent_tool_duration_seconds_count", 1, tool="get_order_details")
        grew("cs_agent_tool_duration_seconds_count", 1, tool="cancel_pending_order")
        grew("cs_agent_confirmations_total", 1, decision="approve")
        assert total(after, "cs_agent_model_tokens_total") > total(
            before, "cs_agent_model_tokens_total"
        )
        assert value(after, "cs_agent_active_runs") == 0
        assert value(after, "cs_agent_open_streams") == 0
        assert value(after, "cs_agent_db_pool_connections_in_use") >= 0

    async def test_a_tool_failing_three_times_trips_its_breaker_once(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        before = await scrape(client)
        model_server.use(
            Script(
                [
                    *(Reply.call("get_order_details", order_id=f"#W000000{i}") for i in range(4)),
                    Reply.say("I could not find those orders."),
                ]
            )
        )
        r = await client.post(
            "/threads/mb/messages", json={"content": "my orders?"}, headers=server.headers(NOAH)
        )
        assert r.json()["status"] == "completed"
        after = await scrape(client)
        trips = "cs_agent_breaker_trips_total"
        tool = "get_order_details"
        assert value(after, trips, tool=tool) - value(before, trips, tool=tool) == 1

    async def test_no_label_names_a_user_a_thread_or_a_run(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hello!")]))
        r = await client.post(
            "/threads/secret-session/messages", json={"content": "hi"}, headers=server.headers(NOAH)
        )
        text = await scrape(client)
        labels = {v for (_, pairs) in samples(text) for _, v in pairs}
        assert not {NOAH, "secret-session", r.json()["run_id"]} & labels
        assert not any(NOAH in v or "secret-session" in v for v in labels)
