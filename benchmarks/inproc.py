"""The compiled graph run in-process, no HTTP: a separate process like the load generator.

    python -m benchmarks.inproc --checkpointer postgres|memory --customers N --total-turns N

The graph is built exactly as the service builds it (app.agent.graph.build_graph with
build_tools, the write ledger, the preferences store and ChatOpenAI against the same model
server); only the checkpointer differs with `--checkpointer memory` (InMemorySaver:
LangGraph's own cost).
The process gets the service's garbage-collector settings and, with the Postgres
checkpointer, runs each turn with the step's writes batched as the service does.
`--stream` runs `astream` with the service's stream modes instead of `ainvoke`.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

from app.agent.graph import Graph, build_graph, run_config, stream_turn
from app.agent.llm import build_chat_model, model_http_client
from app.agent.nodes import TOKEN_KEY
from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer, run_batching
from app.db.pool import open_pool
from app.gc_tuning import tune_for_serving
from app.identity import AgentContext, Role
from app.threads.archive import PgTranscriptArchive
from app.tools.registry import PostgresWriteLedger, build_tools
from benchmarks import eventloop
from benchmarks.loadgen import Pair, customers, question, read_pairs


@dataclass
class InProcess:
    graph: Graph
    settings: Settings
    pool: AsyncConnectionPool[Any]
    http: httpx2.AsyncClient  # the model's HTTP client, the service's own kind

    async def close(self) -> None:
        await self.http.aclose()
        await self.pool.close()

    def _turn(
        self, user_id: str, session: str, text: str, role: Role
    ) -> tuple[dict[str, Any], RunnableConfig, AgentContext]:
        thread_id = f"{user_id}:{session}"
        message = HumanMessage(content=text, id=str(uuid.uuid4()))
        context = AgentContext(user_id=user_id, role=role, thread_id=thread_id)
        return {"incoming": message}, run_config(thread_id, self.settings), context

    async def tokens(
        self, user_id: str, session: str, text: str, role: Role = "customer"
    ) -> AsyncIterator[str]:
        """One turn streamed with the service's stream modes, checkpoint batching and
        durability: the answer's tokens as the agent writes them."""
        graph_input, config, context = self._turn(user_id, session, text, role)
        async with run_batching(self.graph.checkpointer):
            async for mode, chunk in stream_turn(self.graph, graph_input, config, context):
                token = isinstance(chunk, dict) and chunk.get(TOKEN_KEY)
                if mode == "custom" and token:
                    yield token

    async def turn(self, user_id: str, session: str, text: str, *, stream: bool) -> dict[str, Any]:
        wall = time.time()
        t0 = time.perf_counter()
        ttft: float | None = None
        error: str | None = None
        try:
            if stream:
                async for _ in self.tokens(user_id, session, text):
                    if ttft is None:
                        ttft = (time.perf_counter() - t0) * 1000
            else:
                graph_input, config, context = self._turn(user_id, session, text, "customer")
                async with run_batching(self.graph.checkpointer):  # as the service runs a turn
                    await self.graph.ainvoke(
                        graph_input, config, context=context, durability="sync"
                    )
        except Exception as exc:  # a benchmark counts failures, it does not stop on them
            error = type(exc).__name__
        latency = (time.perf_counter() - t0) * 1000
        return {
            "start": wall,
            "latency_ms": latency,
            "ttft_ms": ttft,
            "ok": error is None,
            "error": error,
        }


async def open_in_process(database_url: str, model_url: str, checkpointer: str) -> InProcess:
    settings = Settings(
        database_url=database_url,
        openai_base_url=model_url,
        openai_api_key="x",
        write_confirmation="off",
    )
    pool = await open_pool(database_url, settings, name="inproc")
    saver: Any = PostgresCheckpointer(pool) if checkpointer == "postgres" else InMemorySaver()
    tools = build_tools(pool)
    http = model_http_client(settings)
    graph = build_graph(
        model=build_chat_model(settings, http_client=http),
        read_tools=tools.read,
        write_tools=tools.write,
        checkpointer=saver,
        settings=settings,
        ledger=PostgresWriteLedger(pool),
        store=AsyncPostgresStore(pool),  # the agent reads remembered preferences, as served
        archive=PgTranscriptArchive(pool),  # long threads fold into a summary, as served
    )
    tune_for_serving(settings.gc_gen0_threshold)  # the service's collector settings too
    return InProcess(graph, settings, pool, http)


async def run(args: argparse.Namespace, pairs: Sequence[Pair]) -> dict[str, Any]:
    target = await open_in_process(args.database_url, args.model_url, args.checkpointer)

    async def turn(user_id: str, session: str, text: str) -> dict[str, Any]:
        return await target.turn(user_id, session, text, stream=args.stream)

    try:
        for i in range(args.warmup):  # connections, imports, first-call caches
            user_id, order_id = pairs[i % len(pairs)]
            await target.turn(user_id, f"{args.tag}-warm{i}", question(0, order_id), stream=True)
        cpu0 = time.process_time()
        t0 = time.time()
        results = await customers(
            pairs, args.customers, args.turns, args.total_turns, args.tag, turn
        )
        elapsed = time.time() - t0
        cpu = time.process_time() - cpu0
    finally:
        await target.close()
    return {"started": t0, "elapsed_s": elapsed, "cpu_s": cpu, "turns": results}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inproc")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--model-url", required=True, help="the model server's /v1 URL")
    parser.add_argument("--checkpointer", choices=["postgres", "memory"], default="postgres")
    parser.add_argument("--stream", action="store_true", help="astream like the service")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--customers", type=int, default=1)
    parser.add_argument("--turns", type=int, default=3, help="turns per conversation")
    parser.add_argument("--total-turns", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tag", default="inproc")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    result = eventloop.run(run(args, read_pairs(args.pairs)))
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
