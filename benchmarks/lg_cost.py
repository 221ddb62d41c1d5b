"""What a turn costs through the LangGraph API (`/lg`) against the native route.

    .venv/bin/python -m benchmarks.lg_cost [--turns 60] [--out F.json] [--md F.md]

The same read turn ("where is my order X?": model, get_order_details, model) with the
instant scripted model (benchmarks.policy:OrderLookup), one customer, one turn at a time,
each on a new thread, in two ways:

- native: `POST /threads/{session}/messages` (SSE: run, token..., tool_call, tool_result,
  done), as the chat page sends it;
- /lg: `POST /lg/threads/{session}/runs/stream` with `if_not_exists: create` and the
  stream modes Agent Chat UI and `useStream` ask for (`values`, `messages-tuple`,
  `updates`): the same run, its events translated (app/api/lg/translate.py), the state
  read at the run's start and end for `values`.

Blocks of ten turns alternate between the two, so drift (caches, the database's own
state) lands on both. Per turn: the service's CPU (one worker process; its idle CPU,
measured first, subtracted), the client's latency (request to the stream's end) and what
went over the wire. Standalone it makes its own database on DATABASE_URL's server (else
postgres@127.0.0.1, trust) and drops it; `make bench` runs `measure` against its own
instant service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg

from benchmarks.client import SSE, Pool, read_stream
from benchmarks.procs import (
    DEFAULT_ADMIN_URL,
    JWT_SECRET,
    PY,
    Proc,
    free_port,
    run_checked,
    with_database,
)

POLICY = "benchmarks.policy:OrderLookup"
BLOCK = 10
WARMUP = 12  # turns of each kind first: prepared statements, caches, the pool
LG_MODES = ["values", "messages-tuple", "updates"]
MODES = ("native", "lg")


def log(message: str) -> None:
    print(f"[lg_cost {time.strftime('%H:%M:%S')}] {message}", flush=True)


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def token(user_id: str) -> str:
    from app.api.auth import issue_token

    return issue_token(JWT_SECRET, user_id, ttl_s=24 * 3600)


class Turns:
    """One customer's turns, each on a new thread, by either route."""

    def __init__(self, url: str, user: str, order: str) -> None:
        self.http = Pool(url, 2)
        self.headers = {"Authorization": f"Bearer {token(user)}"}
        self.text = f"Hi, where is my order {order}?"
        self.count = 0

    async def turn(self, mode: str) -> tuple[float, int, int]:
        """(latency ms, events, bytes of event data) of one turn."""
        self.count += 1
        session = f"lgcost-{os.getpid()}-{self.count}"
        received = [0]
        ended: list[str] = []

        def on_event(sse: SSE) -> None:
            received[0] += len(sse.data)
            if sse.event in ("done", "error"):
                ended.append(sse.event)

        body: dict[str, Any]
        if mode == "native":
            path, body = f"/threads/{session}/messages", {"content": self.text}
        else:
            path = f"/lg/threads/{session}/runs/stream"
            body = {
                "assistant_id": "agent",
                "input": {"messages": [{"type": "human", "content": self.text}]},
                "stream_mode": LG_MODES,
                "if_not_exists": "create",
            }
        started = time.perf_counter()
        _, events, failed = await read_stream(self.http, path, body, self.headers, on_event)
        latency = (time.perf_counter() - started) * 1000
        if failed or "error" in ended or (mode == "native" and not ended):
            raise RuntimeError(f"{mode} turn failed: {failed or ended}")
        return latency, events, received[0]


def _summary(samples: list[tuple[float, int, int]], cpu_ms: float) -> dict[str, Any]:
    latencies = sorted(s[0] for s in samples)
    return {
        "turns": len(samples),
        "cpu_ms_per_turn": cpu_ms / len(samples),
        "latency_ms_p50": statistics.median(latencies),
        "latency_ms_p95": latencies[max(0, round(0.95 * len(latencies)) - 1)],
        "events_per_turn": statistics.mean(s[1] for s in samples),
        "bytes_per_turn": statistics.mean(s[2] for s in samples),
    }


async def measure(url: str, pid: int, user: str, order: str, turns: int) -> dict[str, Any]:
    client = Turns(url, user, order)
    try:
        for _ in range(WARMUP):
            for mode in MODES:
                await client.turn(mode)
        await asyncio.sleep(1.0)
        idle_s = 3.0
        idle0 = cpu_s(pid)
        await asyncio.sleep(idle_s)
        idle_rate = (cpu_s(pid) - idle0) / idle_s  # the poller, the webhook worker

        samples: dict[str, list[tuple[float, int, int]]] = {m: [] for m in MODES}
        cpu: dict[str, float] = dict.fromkeys(MODES, 0.0)
        blocks = max(1, turns // BLOCK)
        for _ in range(blocks):
            for mode in MODES:
                cpu0, t0 = cpu_s(pid), time.monotonic()
                for _ in range(BLOCK):
                    samples[mode].append(await client.turn(mode))
                await asyncio.sleep(0.2)  # what a run finishes after its last event
                elapsed = time.monotonic() - t0
                cpu[mode] += max(0.0, cpu_s(pid) - cpu0 - idle_rate * elapsed) * 1000
        results = {m: _summary(samples[m], cpu[m]) for m in MODES}
    finally:
        await client.http.aclose()
    native, lg = results["native"], results["lg"]
    return {
        "turns": blocks * BLOCK,
        "idle_cpu_ms_per_s": idle_rate * 1000,
        **results,
        "extra_cpu_ms_per_turn": lg["cpu_ms_per_turn"] - native["cpu_ms_per_turn"],
        "extra_latency_ms_p50": lg["latency_ms_p50"] - native["latency_ms_p50"],
    }


def render(r: dict[str, Any]) -> str:
    lines = [
        f"{r['turns']} read turns each way (model, get_order_details, model; the instant"
        " scripted model), one customer, one turn at a time, each on a new thread, in"
        f" alternating blocks of {BLOCK}; one service process, its idle CPU"
        f" ({r['idle_cpu_ms_per_s']:.1f} ms/s) subtracted (`python -m benchmarks.lg_cost`)."
        f" /lg streams {', '.join(f'`{m}`' for m in LG_MODES)} (what Agent Chat UI asks"
        " for) and creates the thread with the run (`if_not_exists: create`).",
        "",
        "| route | service CPU ms/turn | latency p50 ms | latency p95 ms | events/turn"
        " | bytes/turn |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {"native": "native `POST /threads/{s}/messages`", "lg": "`/lg` `runs.stream`"}
    for mode in MODES:
        m = r[mode]
        lines.append(
            f"| {names[mode]} | {m['cpu_ms_per_turn']:.1f} | {m['latency_ms_p50']:.1f}"
            f" | {m['latency_ms_p95']:.1f} | {m['events_per_turn']:.0f}"
            f" | {m['bytes_per_turn']:,.0f} |"
        )
    native = r["native"]["cpu_ms_per_turn"]
    lines += [
        "",
        f"The translation costs {r['extra_cpu_ms_per_turn']:+.1f} ms of service CPU per turn"
        f" ({r['extra_cpu_ms_per_turn'] / native:+.0%} of a native turn's) and"
        f" {r['extra_latency_ms_p50']:+.1f} ms of median latency.",
        "",
    ]
    return "\n".join(lines)


def customer(url: str) -> tuple[str, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT customer_id, id FROM orders ORDER BY id LIMIT 1").fetchone()
    assert row is not None, "the shop is empty"
    return str(row[0]), str(row[1])


def run(admin_url: str, turns: int, out: Path) -> dict[str, Any]:
    name = f"csagent_lgcost_{os.getpid()}"
    url = with_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    procs: list[Proc] = []
    try:
        log(f"database {name}; seeding")
        run_checked([PY, "-m", "app", "seed"], {"DATABASE_URL": url}, out / "seed.log")
        model_port = free_port()
        model_url = f"http://127.0.0.1:{model_port}/v1"
        argv = [PY, "-m", "tests.fakellm", "--port", str(model_port), "--policy", POLICY]
        procs.append(Proc("model", argv, {}, out / "model.log", f"{model_url}/models").start())
        port = free_port()
        service = f"http://127.0.0.1:{port}"
        env = {
            "DATABASE_URL": url,
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "x",
            "JWT_SECRET": JWT_SECRET,
            "LOG_LEVEL": "WARNING",
            "WEB_WORKERS": "1",
            "RATE_LIMIT_POSTS_BURST": "1000000",  # one customer, hundreds of turns
            "TOKEN_BUDGET_PER_DAY": "0",
        }
        argv = [PY, "-m", "app", "serve", "--no-seed", "--port", str(port)]
        procs.append(Proc("ours", argv, env, out / "ours.log", f"{service}/healthz").start())
        user, order = customer(url)
        log(f"{turns} turns each way, customer {user}")
        return asyncio.run(measure(service, procs[-1].pid, user, order, turns))
    finally:
        for proc in reversed(procs):
            proc.stop()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lg_cost", description=__doc__)
    parser.add_argument("--turns", type=int, default=60, help="measured turns each way")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    parser.add_argument("--md", type=Path, help="write the markdown table here too")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    admin = os.environ.get("DATABASE_URL") or DEFAULT_ADMIN_URL
    logs = Path(tempfile.mkdtemp(prefix="lg-cost-"))
    results = run(admin, args.turns, logs)
    text = render(results)
    print(text)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.md:
        args.md.write_text(text)


if __name__ == "__main__":
    main()
