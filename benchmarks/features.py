"""What the agent's own techniques buy, measured in-process on the real stack.

    .venv/bin/python -m benchmarks.features [--out FILE]

1. Tool-result cache and text observations (on / off): a scripted multi-step turn that
   repeats lookups; model calls, model input tokens and database transactions per turn.
2. Summaries (on / off) on long threads: checkpoint bytes written and model input tokens per
   turn at 4, 40 and 400 messages of history.

Everything real but the model: Postgres (a fresh database), the compiled graph with
AsyncPostgresSaver, the tools, and ChatOpenAI against the scripted OpenAI-compatible server.
Input tokens are the scripted server's estimate (about 4 characters per token of what it was
sent), the same for every variant.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

from app.agent.graph import Graph, build_graph, run_config
from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer
from app.db.migrate import migrate
from app.db.pool import open_pool
from app.db.transfer import import_dir
from app.demo.chat import prompt_tokens
from app.identity import AgentContext
from app.threads.archive import PgTranscriptArchive
from app.tools.registry import PostgresWriteLedger, build_tools
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.fakes.fixtures import chat_model
from tests.pg import create_fresh_database, drop_database

FIXTURE = Path(__file__).parents[1] / "tests" / "fixtures" / "tau_small"
USER = "noah_brown_6181"
ORDER = "#W2611340"
TURNS = 6


def repeat_lookups(request: ChatRequest) -> Reply:
    """Per turn: order, customer, the order again, then answer. Every turn asks the same."""
    users = [i for i, m in enumerate(request.messages) if m.get("role") == "user"]
    start = users[-1] if users else 0
    done = sum(1 for m in request.messages[start:] if m.get("role") == "tool")
    steps = [
        Reply.call("get_order_details", order_id=ORDER),
        Reply.call("get_user_details", user_id=USER),
        Reply.call("get_order_details", order_id=ORDER),
    ]
    return steps[done] if done < len(steps) else Reply.say("Your order is pending.")


def chatty(request: ChatRequest) -> Reply:
    if (request.system_prompt or "").startswith("You summarise"):
        return Reply.say(f"The customer {USER} asked about order {ORDER}; it is pending.")
    return Reply.say("Thanks, noted. " + "Here is a longer answer with some detail. " * 6)


@dataclass
class Rig:
    pool: AsyncConnectionPool[Any]
    server: ScriptedModelServer
    url: str

    def graph(self, settings: Settings) -> Graph:
        tools = build_tools(self.pool)
        return build_graph(
            model=chat_model(self.server, streaming=True, timeout=30),
            read_tools=tools.read,
            write_tools=tools.write,
            checkpointer=PostgresCheckpointer(self.pool),
            settings=settings,
            ledger=PostgresWriteLedger(self.pool),
            store=AsyncPostgresStore(self.pool),
            archive=PgTranscriptArchive(self.pool),
        )

    async def checkpoint_bytes(self, thread_id: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT
                     (SELECT coalesce(sum(octet_length(checkpoint::text)
                                          + octet_length(metadata::text)), 0)
                        FROM checkpoints WHERE thread_id = %(t)s)
                   + (SELECT coalesce(sum(octet_length(blob)), 0)
                        FROM checkpoint_blobs WHERE thread_id = %(t)s)
                   + (SELECT coalesce(sum(octet_length(blob)), 0)
                        FROM checkpoint_writes WHERE thread_id = %(t)s) AS bytes""",
                {"t": thread_id},
            )
            row = await cur.fetchone()
            return int(row["bytes"]) if row else 0


async def say(graph: Graph, settings: Settings, thread: str, text: str) -> dict[str, Any]:
    ctx = AgentContext(user_id=USER, role="customer", thread_id=thread)
    message = HumanMessage(content=text, id=str(uuid.uuid4()))
    return await graph.ainvoke(
        {"incoming": message}, run_config(thread, settings), context=ctx, durability="sync"
    )


def tools_this_turn(values: dict[str, Any]) -> int:
    messages = values["messages"]
    start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    return sum(1 for m in messages[start:] if isinstance(m, ToolMessage))


async def cache_and_format(rig: Rig, base: Settings) -> list[dict[str, Any]]:
    rows = []
    for cache_on in (False, True):
        for fmt in ("json", "text"):
            settings = base.model_copy(
                update={"tool_cache_enabled": cache_on, "observation_format": fmt}
            )
            graph = rig.graph(settings)
            rig.server.use(repeat_lookups)
            thread = f"{USER}:feat{uuid.uuid4().hex[:8]}"
            calls, tokens, tool_calls, from_db = [], [], [], []
            for i in range(TURNS):
                before_req = len(rig.server.requests)
                values = await say(graph, settings, thread, f"where is my order {ORDER}? ({i})")
                new = rig.server.requests[before_req:]
                calls.append(len(new))
                tokens.append(sum(prompt_tokens(r) for r in new))
                used = tools_this_turn(values)
                tool_calls.append(used)
                from_db.append(used - int((values.get("cache_stats") or {}).get("hits", 0)))
            rows.append(
                {
                    "cache": "on" if cache_on else "off",
                    "observations": fmt,
                    "model_calls": statistics.median(calls),
                    "input_tokens": statistics.median(tokens),
                    "tool_calls": statistics.median(tool_calls),
                    "from_db": statistics.median(from_db),
                }
            )
    return rows


async def long_threads(rig: Rig, base: Settings) -> list[dict[str, Any]]:
    rows = []
    for summaries in (False, True):
        trigger = base.summary_trigger_tokens if summaries else 10**9
        settings = base.model_copy(
            update={"summary_trigger_tokens": trigger, "context_max_tokens": 10**6}
        )
        graph = rig.graph(settings)
        rig.server.use(chatty)
        for size in (4, 40, 400):
            thread = f"{USER}:long{uuid.uuid4().hex[:8]}"
            for i in range(size // 2):
                await say(graph, settings, thread, f"message {i}")
            measured_bytes, measured_tokens = [], []
            for i in range(3):
                before_b, before_r = await rig.checkpoint_bytes(thread), len(rig.server.requests)
                await say(graph, settings, thread, f"one more question {i}")
                measured_bytes.append(await rig.checkpoint_bytes(thread) - before_b)
                agent = [
                    r
                    for r in rig.server.requests[before_r:]
                    if not (r.system_prompt or "").startswith("You summarise")
                ]
                measured_tokens.append(sum(prompt_tokens(r) for r in agent))
            rows.append(
                {
                    "summaries": "on" if summaries else "off",
                    "history": size,
                    "bytes": statistics.median(measured_bytes),
                    "input_tokens": statistics.median(measured_tokens),
                }
            )
    return rows


def render(cache_rows: list[dict[str, Any]], long_rows: list[dict[str, Any]], took: float) -> str:
    lines = [
        "## 6. The agent's own techniques (in-process, `python -m benchmarks.features`)",
        "",
        f"Real Postgres, graph, tools and ChatOpenAI; scripted model. Took {took:.0f} s.",
        "",
        "**Tool-result cache and text observations.** Each turn asks about the same order; the",
        "script looks up the order, the customer, the order again, then answers; "
        f"{TURNS} turns on one thread, medians per turn. *Lookups that reached the",
        "database* are the tool calls not served from the cache (each is one to three SQL",
        "statements; checkpoint writes are the same in every variant).",
        "",
        "| cache | observations | model calls/turn | model input tokens/turn | tool calls/turn "
        "| lookups that reached the database/turn |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in cache_rows:
        lines.append(
            f"| {r['cache']} | {r['observations']} | {r['model_calls']:g} | "
            f"{r['input_tokens']:,.0f} | {r['tool_calls']:g} | {r['from_db']:g} |"
        )
    lines += [
        "",
        "**Summaries on long threads.** Threads built to N messages with chatty turns, then 3",
        "measured turns (medians). The trim budget is lifted for both variants so the model",
        "input shows what the working list itself costs; *off* is the service before summaries.",
        "",
        "| summaries | history (messages) | checkpoint bytes written/turn "
        "| model input tokens/turn |",
        "|---|---:|---:|---:|",
    ]
    for r in long_rows:
        lines.append(
            f"| {r['summaries']} | {r['history']} | {r['bytes']:,.0f} | {r['input_tokens']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


async def main() -> str:
    url, admin = create_fresh_database("csagent_features")
    started = time.monotonic()
    try:
        await migrate(url)
        base = Settings(database_url=url, _env_file=None)
        base = base.model_copy(update={"write_confirmation": "off"})
        pool = await open_pool(url, base, name="features")
        try:
            await import_dir(pool, FIXTURE, replace=True)
            with ScriptedModelServer(repeat_lookups) as server:
                rig = Rig(pool=pool, server=server, url=url)
                cache_rows = await cache_and_format(rig, base)
                long_rows = await long_threads(rig, base)
        finally:
            await pool.close()
    finally:
        drop_database(admin, url)
    return render(cache_rows, long_rows, time.monotonic() - started)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    text = asyncio.run(main())
    if args.out is not None:
        args.out.write_text(text)
    print(text)
