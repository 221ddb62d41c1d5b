"""Turns/s for 1, 2 and 3 replicas behind HAProxy and PgBouncer, and where the CPU goes.

    .venv/bin/python -m benchmarks.scale [--replicas 1,2,3 --turns 600 --concurrency 32]
    make bench-scale

For each replica count, docker-compose.yml's topology is started from processes
(tests/scale/topology.py: a private Postgres, PgBouncer in transaction mode, the replicas,
HAProxy), the scripted model answers at once from its own process (tests.fakellm with the
scale test's policy: every conversation hands over to a human, a write), and a load
generator in its own process (benchmarks/client.py: plain asyncio HTTP, cheap per turn)
holds `--concurrency` conversations open through the load balancer, each one turn with
its write, until `--turns` are done. Every process's CPU time is read with psutil before and
after the measured turns, so the table shows where the time goes; `other` is the rest of
the machine (whatever else runs on it). Prints markdown; `--out FILE` writes it too.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from benchmarks.client import OurClient, http_client
from benchmarks.procs import free_port
from benchmarks.stats import fmt, percentile
from tests.scale.policy import HandoffPolicy
from tests.scale.topology import JWT_SECRET, Deployment

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "I want to talk to a human about my delivery, please."
POLICY = f"{HandoffPolicy.__module__}:{HandoffPolicy.__name__}"
WARMUP_TURNS = 60


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the load generator (its own process: `python -m benchmarks.scale load ...`) ---


async def load(url: str, concurrency: int, turns: int, tag: str) -> dict[str, Any]:
    """`turns` one-turn conversations, `concurrency` at a time; a new customer for each
    (the per-customer rate limits are not what is measured)."""
    client = OurClient(http_client(url, concurrency), JWT_SECRET)
    numbers = itertools.count()
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def worker() -> None:
        while (i := next(numbers)) < turns:
            result = await client.turn(f"bench_{tag}_{i}", f"{tag}-{i}", QUESTION)
            if result.ok:
                latencies.append(result.latency_ms)
            else:
                errors[result.error or "?"] += 1

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {
        "turns": len(latencies),
        "elapsed_s": elapsed,
        "turns_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "errors": dict(errors),
        "cpu_s": time.process_time() - cpu0,
    }


class LoadGenerator:
    """The load generator's process, started and imported before the CPU is read: it says
    `ready`, waits for a line on stdin, runs its turns, and prints its result as JSON."""

    def __init__(self, url: str, concurrency: int, turns: int, tag: str) -> None:
        argv = [sys.executable, "-m", "benchmarks.scale", "load", "--url", url, "--tag", tag]
        argv += ["--concurrency", str(concurrency), "--turns", str(turns)]
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError("the load generator did not start")

    def run(self) -> dict[str, Any]:
        self.stdin.write("go\n")
        self.stdin.flush()
        result: dict[str, Any] = json.loads(self.stdout.readline())
        if self.proc.wait(timeout=60) != 0:
            raise RuntimeError("the load generator failed")
        return result


def run_load(url: str, concurrency: int, turns: int, tag: str) -> dict[str, Any]:
    return LoadGenerator(url, concurrency, turns, tag).run()


# --- CPU accounting ---


def cpu_s(pid: int) -> float:
    """CPU seconds of a process, its live descendants, and its children that exited
    (Postgres backends)."""
    try:
        process = psutil.Process(pid)
        t = process.cpu_times()
        total = float(t.user + t.system + t.children_user + t.children_system)
        for child in process.children(recursive=True):
            with_child = child.cpu_times()
            total += with_child.user + with_child.system
        return total
    except psutil.Error:
        return 0.0


def machine_busy_s() -> float:
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0))


def measure(
    replicas: int, model_url: str, model_pid: int, concurrency: int, turns: int
) -> dict[str, Any]:
    env = {"WRITE_CONFIRMATION": "off"}
    with Deployment(replicas, model_url, **env) as deployment:
        tag = f"r{replicas}-{os.getpid()}"
        run_load(deployment.url, concurrency, WARMUP_TURNS, tag + "-warm")
        pids = {**deployment.pids(), "model server": model_pid}
        generator = LoadGenerator(deployment.url, concurrency, turns, tag)
        before = {name: cpu_s(pid) for name, pid in pids.items()}
        machine0 = machine_busy_s()
        result = generator.run()
        machine = machine_busy_s() - machine0
        used = {name: cpu_s(pid) - before[name] for name, pid in pids.items()}
    services = sum(v for k, v in used.items() if k.startswith("service"))
    roles = {
        "services": services,
        "postgres": used.get("postgres", 0.0),
        "pgbouncer": used.get("pgbouncer", 0.0),
        "haproxy": used.get("haproxy", 0.0),
        "model server": used["model server"],
        "load generator": result["cpu_s"],
    }
    roles["other"] = max(machine - sum(roles.values()), 0.0)
    per_service = [v for k, v in sorted(used.items()) if k.startswith("service")]
    return {
        "replicas": replicas,
        **result,
        "cpu": roles,
        "per_service_cpu_s": per_service,
        "machine_busy_s": machine,
    }


# --- report ---


def report(runs: list[dict[str, Any]], concurrency: int) -> str:
    cores = os.cpu_count() or 1
    lines = [
        f"## Many replicas: turns/s ({cores} cores, {concurrency} conversations at once)",
        "",
        "Each turn is a new conversation with one write (a hand-over), through HAProxy and",
        "PgBouncer (transaction mode); the model answers at once. CPU columns are cores busy",
        "during the measured turns (CPU seconds / wall seconds); `other` is everything else",
        "the machine ran meanwhile.",
        "",
        "| replicas | turns/s | p50 / p95 ms | errors | services | postgres | pgbouncer"
        " | haproxy | model server | load gen | other | machine busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        wall = run["elapsed_s"]
        cpu = run["cpu"]
        share = " | ".join(
            fmt(cpu[k] / wall, 2)
            for k in (
                "services",
                "postgres",
                "pgbouncer",
                "haproxy",
                "model server",
                "load generator",
                "other",
            )
        )
        lines.append(
            f"| {run['replicas']} | {fmt(run['turns_per_s'])} | {fmt(run['p50_ms'], 0)} /"
            f" {fmt(run['p95_ms'], 0)} | {sum(run['errors'].values())} | {share}"
            f" | {fmt(run['machine_busy_s'] / wall / cores * 100, 0)}% |"
        )
    lines += ["", "Cores busy per replica:", ""]
    for run in runs:
        wall = run["elapsed_s"]
        per = " + ".join(fmt(s / wall, 2) for s in run["per_service_cpu_s"])
        lines.append(f"- {run['replicas']} replica(s): {per}")
    lines += ["", "CPU milliseconds per turn:", ""]
    lines += ["| replicas | services | postgres | pgbouncer | haproxy | model | load gen |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for run in runs:
        n = max(run["turns"], 1)
        cpu = run["cpu"]
        cells = " | ".join(
            fmt(cpu[k] / n * 1000, 1)
            for k in (
                "services",
                "postgres",
                "pgbouncer",
                "haproxy",
                "model server",
                "load generator",
            )
        )
        lines.append(f"| {run['replicas']} | {cells} |")
    lines += ["", *ceilings(runs, cores)]
    errors = [f"{run['replicas']}: {run['errors']}" for run in runs if run["errors"]]
    if errors:
        lines += ["", "Errors by replica count: " + "; ".join(errors)]
    return "\n".join(lines) + "\n"


def ceilings(runs: list[dict[str, Any]], cores: int) -> list[str]:
    """What the CPU per turn allows on this machine, had it nothing else to run: one
    replica is one event loop, so one core at most; all of them share `cores`."""
    turns = sum(run["turns"] for run in runs) or 1
    service = sum(run["cpu"]["services"] for run in runs) / turns
    total = sum(sum(v for k, v in run["cpu"].items() if k != "other") for run in runs) / turns
    return [
        f"CPU per turn, all processes of the deployment and the load: {fmt(total * 1000, 0)} ms"
        f" ({fmt(service * 1000, 0)} ms of it in the service). So {cores} cores do at most"
        f" {fmt(cores / total, 0)} turns/s however many replicas run, and one replica"
        f" (one event loop, one core) at most {fmt(min(1 / service, cores / total), 0)}.",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("load", help="the load generator (run by the benchmark)")
    gen.add_argument("--url", required=True)
    gen.add_argument("--tag", required=True)
    gen.add_argument("--concurrency", type=int, default=32)
    gen.add_argument("--turns", type=int, default=600)
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "load":
        print("ready", flush=True)
        sys.stdin.readline()
        result = asyncio.run(load(args.url, args.concurrency, args.turns, args.tag))
        print(json.dumps(result), flush=True)
        return

    port = free_port()
    model = subprocess.Popen(
        [sys.executable, "-m", "tests.fakellm", "--port", str(port), "--policy", POLICY],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    runs: list[dict[str, Any]] = []
    try:
        model_url = f"http://127.0.0.1:{port}/v1"
        for replicas in (int(n) for n in args.replicas.split(",")):
            log(f"{replicas} replica(s): {args.turns} turns, {args.concurrency} at once")
            run = measure(replicas, model_url, model.pid, args.concurrency, args.turns)
            log(f"{replicas} replica(s): {run['turns_per_s']:.1f} turns/s")
            runs.append(run)
    finally:
        model.terminate()
        model.wait(timeout=15)
    text = report(runs, args.concurrency)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
