"""What the metrics and the tracing hooks cost a turn, one process and multi-process.

    .venv/bin/python -m benchmarks.metrics_cost [--turns 10000]

A turn of the service (a tool call between two model calls, streamed over SSE) makes the
observations `one_turn` makes, through the same functions: the lease claim's lock wait, the
active-runs and open-streams gauges, two model calls, one tool call, and the run's end (status,
duration, time to first token, tool result, cache, tokens in and out): 16 values written.
In multi-process mode (`serve --workers N`) prometheus-client writes each one to this
process's mmap file. Each mode runs in its own process, since prometheus-client picks its
mode when it is first imported. Tracing is off, as by default: its hooks are timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any


def measure(turns: int) -> dict[str, Any]:
    from app import tracing
    from app.metrics import Metrics, open_stream, tool_call

    metrics = Metrics()
    i = metrics.i

    def one_turn() -> None:
        i.lock_wait_seconds.observe(0.002)
        metrics.run_started()
        with open_stream():
            i.model_call_seconds.observe(0.4)
            with tool_call("calc_shipping", "call_1"):
                pass
            i.model_call_seconds.observe(0.3)
            metrics.run_ended(
                "completed",
                0.9,
                first_token_s=0.5,
                model="demo",
                input_tokens=900,
                output_tokens=40,
                cache_hits=0,
                cache_misses=1,
                tool_oks=1,
                tool_errors=0,
            )

    async def noop() -> None:
        return None

    coroutine = noop()

    def tracing_hooks() -> None:  # what a turn calls with tracing off (the tool's is above)
        _ = tracing.in_run(coroutine, "run", "thread")
        for _ in range(2):
            with tracing.model_span((), 0.0):
                tracing.first_chunk()
        with tracing.span("checkpoint store"), tracing.span("checkpoint store"):
            pass
        tracing.run_outcome("completed", 1, 1)

    out: dict[str, Any] = {"multiprocess": bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))}
    for name, fn in (("metrics", one_turn), ("tracing_off", tracing_hooks)):
        for _ in range(200):  # warm up: label children created, files grown
            fn()
        started = time.perf_counter()
        for _ in range(turns):
            fn()
        out[f"{name}_us_per_turn"] = (time.perf_counter() - started) / turns * 1e6
    coroutine.close()
    started = time.perf_counter()
    for _ in range(100):
        body = metrics.render()
    out["scrape_ms"] = (time.perf_counter() - started) / 100 * 1e3
    out["scrape_bytes"] = len(body)
    return out


def in_child(turns: int, multiprocess: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    with tempfile.TemporaryDirectory(prefix="metrics-cost-") as folder:
        if multiprocess:
            env["PROMETHEUS_MULTIPROC_DIR"] = folder
        argv = [sys.executable, "-m", "benchmarks.metrics_cost", "--child", "--turns", str(turns)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metrics_cost")
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.turns)))
        return
    print(f"{args.turns} turns, each mode in its own process\n")
    print("| mode | metrics, µs/turn | tracing hooks (off), µs/turn | scrape, ms |")
    print("|---|---|---|---|")
    for multiprocess in (False, True):
        r = in_child(args.turns, multiprocess)
        mode = "multi-process (mmap files)" if multiprocess else "one process"
        print(
            f"| {mode} | {r['metrics_us_per_turn']:.1f} | {r['tracing_off_us_per_turn']:.2f}"
            f" | {r['scrape_ms']:.2f} ({r['scrape_bytes']} bytes) |"
        )


if __name__ == "__main__":
    main()
