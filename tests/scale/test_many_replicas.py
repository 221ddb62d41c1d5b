"""Three replicas behind HAProxy and PgBouncer; one is killed (kill -9) mid-run.

docker-compose.yml's topology from processes (tests/scale/topology.py). 200 conversations,
each a write (a hand-over to a human: one tool_executions row, one handoff_tickets row),
40 at a time through the load balancer; every tenth client also leaves its first stream
early and follows the run again from wherever the balancer sends it. Once a third of
the conversations are done, one replica is killed while it runs turns. Every client must
still finish its turn (README "Client disconnect and process death": follow the run again,
hear `run_lost` + `done abandoned`, send the message again with its client_message_id), and
the database must show every write exactly once, no chain forked, no run left running.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fakellm import Latency, ScriptedModelServer
from tests.scale.client import Conversation, converse
from tests.scale.policy import ANSWER, HandoffPolicy
from tests.scale.topology import Deployment, bearer

CONVERSATIONS = 200
AT_ONCE = 40
KILL_AFTER = CONVERSATIONS // 3
LEASE_TTL_S = "3"
QUESTION = "I want to talk to a human about my delivery, please."


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    # 29 words at 40 a second: a turn streams for about 0.7 s, so a kill finds some running.
    latency = Latency(ttft_ms=50, tokens_per_s=40)
    with ScriptedModelServer(HandoffPolicy(), latency=latency, record=False) as server:
        yield server


@pytest.fixture(scope="module")
def deployment(model: ScriptedModelServer) -> Iterator[Deployment]:
    env = {"WRITE_CONFIRMATION": "off", "THREAD_LEASE_TTL_S": LEASE_TTL_S}
    with Deployment(3, model.base_url, **env) as deployment:
        yield deployment


def running_on(deployment: Deployment) -> int:
    rows = deployment.postgres.query("SELECT count(*) FROM runs WHERE status = 'running'")
    return int(rows[0][0])


async def run_conversations(deployment: Deployment, tag: str) -> list[Conversation]:
    """Every conversation to its end; the second replica is killed once KILL_AFTER are
    done and turns are running."""
    finished: list[Conversation] = []
    queue = list(range(CONVERSATIONS))
    victim = deployment.services[1]

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            i = queue.pop(0)
            user = f"cust_scale_{i:03d}"
            finished.append(
                await converse(
                    http,
                    bearer(user),
                    f"{tag}-{i:03d}",
                    user,
                    QUESTION,
                    drop_after_tokens=5 if i % 10 == 0 else None,
                )
            )

    async def killer() -> None:
        while True:
            started = len(finished) >= KILL_AFTER
            busy = await asyncio.to_thread(running_on, deployment) if started else 0
            if busy >= AT_ONCE // 4:  # the victim runs some of them (leastconn spreads them)
                victim.kill9()
                return
            await asyncio.sleep(0.1)

    limits = httpx.Limits(max_connections=AT_ONCE * 2, max_keepalive_connections=AT_ONCE)
    timeout = httpx.Timeout(60, connect=5)
    async with httpx.AsyncClient(base_url=deployment.url, limits=limits, timeout=timeout) as http:
        kill = asyncio.create_task(killer())
        await asyncio.gather(*(client(http) for _ in range(AT_ONCE)))
        assert kill.done(), "the replica was never killed"
    return finished


def test_a_replica_killed_mid_run_loses_no_turn_and_no_write(deployment: Deployment) -> None:
    tag = f"scale-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    started = time.monotonic()
    conversations = asyncio.run(run_conversations(deployment, tag))
    elapsed = time.monotonic() - started
    pg = deployment.postgres
    assert not deployment.services[1].running

    # Every client finished its turn, and the kill did hit running turns.
    assert len(conversations) == CONVERSATIONS
    assert {c.status for c in conversations} == {"completed"}
    hit = [c for c in conversations if c.abandoned]
    assert hit, "the killed replica was running no turn"
    assert all(c.run_lost == c.abandoned for c in conversations)
    assert all(c.follows >= 1 for c in hit)  # the dead run was followed on another replica
    for c in conversations:
        assert c.text in ("", ANSWER), (c.session, c.text)  # "": a replayed turn
    dropped_on_purpose = [c for c in conversations if int(c.session[-3:]) % 10 == 0]
    assert all(c.text == ANSWER for c in dropped_on_purpose if not c.abandoned)
    print(
        f"\n{CONVERSATIONS} conversations in {elapsed:.1f}s; killed mid-run: {len(hit)};"
        f" posts {sum(c.posts for c in conversations)}, follows"
        f" {sum(c.follows for c in conversations)}, 409s {sum(c.busy for c in conversations)},"
        f" 502/503s {sum(c.bad_gateway for c in conversations)}"
    )

    # Every write exactly once: one hand-over per conversation.
    threads = {f"{c.user_id}:{c.session}" for c in conversations}
    like = f"%:{tag}-%"
    executions = pg.query(
        "SELECT thread_id, count(*), bool_and(ok), min(tool_name) FROM tool_executions"
        " WHERE thread_id LIKE %s GROUP BY 1",
        (like,),
    )
    assert {row[0] for row in executions} == threads
    assert {row[1:] for row in executions} == {(1, True, "transfer_to_human_agents")}
    tickets = pg.query(
        "SELECT thread_id, count(*) FROM handoff_tickets WHERE thread_id LIKE %s GROUP BY 1",
        (like,),
    )
    assert {row[0] for row in tickets} == threads
    assert {row[1] for row in tickets} == {1}

    # No chain forked, no run left running, every abandoned run closed.
    forks = pg.query(
        "SELECT thread_id, parent_checkpoint_id FROM checkpoints WHERE thread_id LIKE %s"
        " AND checkpoint_ns = '' AND parent_checkpoint_id IS NOT NULL"
        " GROUP BY 1, 2 HAVING count(*) > 1",
        (like,),
    )
    assert forks == []
    statuses = dict(
        pg.query("SELECT status, count(*) FROM runs WHERE thread_id LIKE %s GROUP BY 1", (like,))
    )
    assert "running" not in statuses
    assert statuses.get("abandoned", 0) >= len(hit)

    # The message once, the answer last, in every transcript.
    with httpx.Client(base_url=deployment.url, timeout=30) as http:
        for c in conversations:
            state = http.get(f"/threads/{c.session}/state", headers=bearer(c.user_id)).json()
            said = [m["content"] for m in state["messages"] if m["role"] == "user"]
            assert said == [QUESTION], (c.session, said)
            assert state["messages"][-1]["content"] == ANSWER, c.session
