"""Realistic capacity: how many open conversations a service holds, open-loop.

    python -m benchmarks.capacity load --target ours --url URL --pairs F --open 1000 ...
    python -m benchmarks.capacity seed --database-url DSN --customers 2000

`load` is the load generator, a separate process: new conversations arrive at a fixed
rate, each a customer who sends `--turns` order-lookup messages with a think time drawn
uniformly from `--think-s` +- `--think-spread-s` (seeded) after each answer's end (the
last one before leaving). The rate is chosen so that `--open` conversations are open at
once (Little's law: rate = open / lifetime, lifetime = turns x (turn + think)); at the
start that many are already under way at ages spread over the lifetime, so the level
holds from the first second (one asyncio process keeps 1,000 open on ~0.05 core). The first
message of a conversation opens a new thread (a new session id), the later ones continue
it. Turns started in the measured window (after `--warmup-s`) count; whatever is still in
flight when it ends is waited for. With `--single N` it is one customer at a time, N turns
one after another: the baseline a level's p95 is compared with.

`section(bench)` (from `make bench`) runs it against our service with the shipped defaults
(one process, the pool of DB_POOL_MAX connections, rate limits and the token budget on)
and against the tutorial peer, on a database of its own with a shop of `customers`
customers so that every open conversation is a different person, and steps the number of
open conversations to find the largest whose p95 turn time stays within 1.2x of one
customer's. While each level runs, a sampler in the benchmark's process reads once a
second what could be queueing: the service's event-loop lag (`/healthz`, answered by the
loop without any I/O), its pool (`/metrics`: connections in use, requests waiting), the
model server's lag, Postgres's backends (pg_stat_activity: active, waiting on a lock),
and every process's CPU; the generator records its own loop lag and CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import eventloop
from benchmarks.client import OurClient, PeerClient, Pool, TurnResult
from benchmarks.loadgen import question, read_pairs
from benchmarks.stats import median, p95, percentile

if TYPE_CHECKING:
    from benchmarks.run import Bench

REFUSED = "http 503 overloaded"  # benchmarks/client.py's error for a refused post
HOLD_RATIO = 1.2  # a level holds when its p95 turn time is within this of one customer's
MAX_ERROR_SHARE = 0.01


# --- the load generator (its own process) -----------------------------------------------


class Generator:
    def __init__(self, args: argparse.Namespace, pairs: Sequence[tuple[str, str]]) -> None:
        self.args = args
        self.pairs = pairs
        http = Pool(args.url, connections=max(args.open, 1))
        self.client: Any = (
            OurClient(http, args.secret) if args.target == "ours" else PeerClient(http)
        )
        self.rows: list[dict[str, Any]] = []
        self.open = 0
        self.in_flight = 0
        self.samples: list[dict[str, float]] = []
        self.lag: list[float] = []
        self.stop_at = 0.0
        self.t0 = 0.0
        self.tasks: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()  # set when no turn is in flight

    def think(self, rng: random.Random) -> float:
        a = self.args
        return max(0.0, rng.uniform(a.think_s - a.think_spread_s, a.think_s + a.think_spread_s))

    async def conversation(self, index: int, turns: int, delay: float) -> None:
        """`delay`, then `turns` times: a message, its answer read to the end, a think time
        (the last one before the customer leaves). Stops at the end of the window."""
        rng = random.Random(self.args.seed * 1_000_003 + index)
        user, order = self.pairs[index % len(self.pairs)]
        session = f"{self.args.tag}-{index}"
        self.open += 1  # one under way from the start is open while it waits (thinks)
        try:
            await asyncio.sleep(delay)
            for k in range(turns):
                if time.time() >= self.stop_at:
                    return
                self.in_flight += 1
                try:
                    result: TurnResult = await self.client.turn(user, session, question(k, order))
                finally:
                    self.in_flight -= 1
                    if not self.in_flight:
                        self.idle.set()
                row = result.as_dict()
                row.pop("extra", None)
                row.update(conversation=index, turn=k, t=result.start - self.t0)
                self.rows.append(row)
                await asyncio.sleep(self.think(rng))
        finally:
            self.open -= 1

    def spawn(self, index: int, turns: int, delay: float) -> None:
        task = asyncio.create_task(self.conversation(index, turns, delay))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def monitor(self) -> None:
        """Once a second: open conversations, turns in flight, the generator's loop lag."""
        tick = 0.05
        worst = 0.0
        next_sample = time.monotonic() + 1.0
        while True:
            before = time.monotonic()
            await asyncio.sleep(tick)
            late = time.monotonic() - before - tick
            worst = max(worst, late)
            self.lag.append(late)
            if time.monotonic() >= next_sample:
                next_sample += 1.0
                self.samples.append(
                    {
                        "t": time.time() - self.t0,
                        "open": self.open,
                        "in_flight": self.in_flight,
                        "lag_max_ms": 1000 * worst,
                    }
                )
                worst = 0.0

    async def run_open(self) -> dict[str, Any]:
        a = self.args
        turns = a.turns
        # a conversation is open from its first message until a think time after its last
        # answer (the customer reads it and leaves): each open one is a customer between
        # messages or waiting for an answer, as a person at a chat window is
        lifetime = turns * (a.turn_s + a.think_s)
        rate = a.open / lifetime
        self.t0 = time.time()
        measure_from = self.t0 + a.warmup_s
        self.stop_at = measure_from + a.measure_s
        rng = random.Random(a.seed)
        monitor = asyncio.create_task(self.monitor())
        index = a.index_offset
        # Already under way at the start (steady state at once): each with some of its
        # turns left, its next message somewhere within one think time.
        # (a conversation of age uniform in its lifetime: 0 to turns-1 messages left after
        # the rest of the current think, which is uniform in one message's slot)
        for _ in range(a.open):
            self.spawn(index, rng.randint(0, turns - 1), rng.uniform(0, a.think_s + a.turn_s))
            index += 1
        cpu0 = cpu1 = None
        arrivals = 0
        start = time.monotonic()
        while time.time() < self.stop_at:
            if cpu0 is None and time.time() >= measure_from:
                cpu0 = time.process_time()
            arrivals += 1
            self.spawn(index, turns, 0.0)
            index += 1
            wait = start + arrivals / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        cpu1 = time.process_time()
        # the measured window's turns still in flight: waited for (bounded by the client's
        # own turn timeout); conversations stop at their next message
        if self.in_flight:
            self.idle.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), a.drain_s)
        unfinished = self.in_flight
        for task in list(self.tasks):
            task.cancel()
        monitor.cancel()
        await self.client.http.aclose()
        window = (measure_from - self.t0, self.stop_at - self.t0)
        return {
            "mode": "open",
            "t0": self.t0,
            "target_open": a.open,
            "rate_per_s": rate,
            "window": window,
            "conversations": index - a.index_offset,
            "turns": [r for r in self.rows if window[0] <= r["t"] < window[1]],
            "warmup_turns": sum(1 for r in self.rows if r["t"] < window[0]),
            "unfinished": unfinished,
            "samples": [s for s in self.samples if window[0] <= s["t"] < window[1]],
            "lag_ms": [1000 * x for x in self.lag],
            "cpu_s": (cpu1 - cpu0) if cpu0 is not None else 0.0,
            "measure_s": a.measure_s,
        }

    async def run_single(self) -> dict[str, Any]:
        """One customer at a time: `--single` turns, conversations of `--turns` (each its
        own customer, as in the open loop), a short pause. One customer posting all of
        them met the shipped post limit (12 a minute after a burst of 20): 429s."""
        a = self.args
        self.t0 = time.time()
        for n in range(a.single):
            user, order = self.pairs[(a.index_offset + n // a.turns) % len(self.pairs)]
            session = f"{a.tag}-s{n // a.turns}"
            result: TurnResult = await self.client.turn(user, session, question(n % a.turns, order))
            row = result.as_dict()
            row.pop("extra", None)
            self.rows.append(row)
            await asyncio.sleep(a.pause_s)
        await self.client.http.aclose()
        return {"mode": "single", "turns": self.rows}


def generate_main(args: argparse.Namespace) -> None:
    pairs = read_pairs(args.pairs)
    gen = Generator(args, pairs)
    result = eventloop.run(gen.run_single() if args.single else gen.run_open())
    Path(args.out).write_text(json.dumps(result))


# --- a shop with enough customers ----------------------------------------------------------


async def seed_shop(url: str, customers: int) -> None:
    from app.config import Settings
    from app.db.migrate import migrate
    from app.db.pool import open_pool
    from app.db.seed import generate
    from app.db.transfer import import_data
    from app.help.repository import sync_help_articles

    await migrate(url)
    pool = await open_pool(url, Settings(db_pool_min=1), name="bench-seed")
    try:
        await sync_help_articles(pool)
        await import_data(pool, generate(customers=customers, orders=customers * 3 // 2))
    finally:
        await pool.close()


# --- the benchmark's section -----------------------------------------------------------------


class Sampler:
    """A thread that reads, once a second, what could be queueing in a level's run."""

    def __init__(
        self, service_url: str, health_path: str, model_url: str, db_url: str, pids: dict[str, int]
    ) -> None:
        self.service = service_url
        self.health_path = health_path
        self.model = model_url
        self.db_url = db_url
        self.pids = dict(pids)
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _get(base: str, path: str) -> tuple[float, str]:
        host, _, port = base.removeprefix("http://").split("/")[0].partition(":")
        conn = http.client.HTTPConnection(host, int(port or 80), timeout=30)
        t0 = time.perf_counter()
        try:
            conn.request("GET", path)
            body = conn.getresponse().read().decode(errors="replace")
        except OSError:
            return float("nan"), ""
        finally:
            conn.close()
        return 1000 * (time.perf_counter() - t0), body

    @staticmethod
    def _gauges(text: str) -> dict[str, float]:
        wanted = {
            "cs_agent_db_pool_connections_in_use": "pool_in_use",
            "cs_agent_db_pool_requests_waiting": "pool_waiting",
            "cs_agent_active_runs": "active_runs",
            "cs_agent_open_streams": "open_streams",
        }
        found: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            key = wanted.get(name.split("{")[0])
            if key and not line.startswith("#"):
                with contextlib.suppress(ValueError, IndexError):
                    found[key] = found.get(key, 0.0) + float(value.split()[0])
        return found

    def _loop(self) -> None:
        import psutil  # type: ignore[import-untyped]
        import psycopg

        from benchmarks.procs import _postgres_cpu_s

        procs = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(psutil.Error):
                procs[name] = psutil.Process(pid)

        def cpu(p: Any) -> float:
            try:
                total = 0.0
                for q in [p, *p.children(recursive=True)]:
                    t = q.cpu_times()
                    total += t.user + t.system
                return float(total)
            except psutil.Error:
                return 0.0

        def run_delay(p: Any) -> float:
            """Seconds the process's threads have waited on a run queue for a core
            (/proc/<pid>/task/*/schedstat, second field): CPU wanted but not given."""
            total = 0
            for task in Path(f"/proc/{p.pid}/task").glob("*/schedstat"):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    total += int(task.read_text().split()[1])
            return total / 1e9

        def machine_busy() -> float:
            t = psutil.cpu_times()
            return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0))

        last = {name: cpu(p) for name, p in procs.items()}
        last_wait = {name: run_delay(p) for name, p in procs.items()}
        last_busy = machine_busy()
        last_pg = _postgres_cpu_s()
        last_t = time.monotonic()
        model_base = self.model.removesuffix("/v1")
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            while not self._stop.wait(1.0):
                sample: dict[str, Any] = {"t": time.time()}
                sample["health_ms"], _ = self._get(self.service, self.health_path)
                sample["model_ms"], _ = self._get(model_base, "/v1/models")
                if self.health_path == "/healthz":
                    _, text = self._get(self.service, "/metrics")
                    sample.update(self._gauges(text))
                row = conn.execute(
                    """SELECT count(*) FILTER (WHERE state = 'active'),
                              count(*) FILTER (WHERE wait_event_type = 'Lock'),
                              count(*) FILTER (WHERE state = 'idle in transaction'),
                              count(*)
                       FROM pg_stat_activity
                       WHERE datname = current_database() AND pid <> pg_backend_pid()"""
                ).fetchone()
                if row:
                    sample.update(pg_active=row[0], pg_lock_waits=row[1], pg_idle_tx=row[2])
                    sample["pg_backends"] = row[3]
                now = time.monotonic()
                dt = max(now - last_t, 1e-6)
                for name, p in procs.items():
                    used = cpu(p)
                    sample[f"cores_{name}"] = (used - last[name]) / dt
                    last[name] = used
                    waited = run_delay(p)
                    sample[f"runq_{name}"] = (waited - last_wait[name]) / dt
                    last_wait[name] = waited
                busy = machine_busy()
                sample["cores_machine"] = (busy - last_busy) / dt
                last_busy = busy
                pg = _postgres_cpu_s()
                sample["cores_postgres"] = max(pg - last_pg, 0.0) / dt  # exited backends
                last_pg, last_t = pg, now
                self.samples.append(sample)

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=40)


def summarise_level(raw: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    turns = raw["turns"]
    ok = [t for t in turns if t["ok"]]
    latency = [t["latency_ms"] for t in ok]
    ttft = [t["ttft_ms"] for t in ok if t.get("ttft_ms") is not None]
    gen = raw.get("samples", [])
    errors = len(turns) - len(ok) + int(raw.get("unfinished", 0))
    t_from = raw["t0"] + raw["window"][0]
    t_to = raw["t0"] + raw["window"][1]
    window = [s for s in samples if t_from <= s["t"] <= t_to]

    def series(key: str) -> list[float]:
        return [float(s[key]) for s in window if key in s and s[key] == s[key]]

    def stat(key: str) -> dict[str, float]:
        values = series(key)
        if not values:
            return {}
        return {"mean": sum(values) / len(values), "p95": p95(values), "max": max(values)}

    probe_keys = [k for s in window for k in s if k != "t"]
    # Overload (app/runs/admission.py): refused posts are answered at once, and count apart
    refused = [t["latency_ms"] for t in turns if str(t.get("error")).startswith(REFUSED)]
    wrong = sum(1 for t in turns if t.get("error") == "wrong answer")
    return {
        "refused": len(refused),
        "refused_ms": {"p50": median(refused), "p95": p95(refused), "max": max(refused or [0])},
        "admitted_errors": errors - len(refused),
        "wrong_answers": wrong,
        "target_open": raw.get("target_open"),
        "open_mean": sum(s["open"] for s in gen) / len(gen) if gen else 0.0,
        "in_flight_mean": sum(s["in_flight"] for s in gen) / len(gen) if gen else 0.0,
        "rate_per_s": raw.get("rate_per_s"),
        "turns": len(turns),
        "errors": errors,
        "error_kinds": _kinds(turns),
        "turns_per_s": len(ok) / raw["measure_s"] if raw.get("measure_s") else 0.0,
        "p50_ms": median(latency),
        "p95_ms": p95(latency),
        "p99_ms": percentile(latency, 99),
        "ttft_p50_ms": median(ttft),
        "ttft_p95_ms": p95(ttft),
        "generator_cores": raw.get("cpu_s", 0.0) / raw["measure_s"] if raw.get("measure_s") else 0,
        "generator_lag_ms": {
            "p99": percentile(raw.get("lag_ms", []), 99),
            "max": max(raw.get("lag_ms", []) or [0.0]),
        },
        "probes": {k: stat(k) for k in dict.fromkeys(probe_keys)},
    }


def _kinds(turns: list[dict[str, Any]]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for t in turns:
        if not t["ok"]:
            kinds[str(t["error"])] = kinds.get(str(t["error"]), 0) + 1
    return kinds


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several generator processes' results of one level, as one."""
    if len(parts) == 1:
        return parts[0]
    merged = dict(parts[0])
    merged["turns"] = [t for p in parts for t in p["turns"]]
    merged["unfinished"] = sum(p["unfinished"] for p in parts)
    merged["cpu_s"] = sum(p["cpu_s"] for p in parts)
    merged["target_open"] = sum(p["target_open"] for p in parts)
    merged["rate_per_s"] = sum(p["rate_per_s"] for p in parts)
    merged["lag_ms"] = [x for p in parts for x in p["lag_ms"]]
    by_t: dict[int, dict[str, float]] = {}
    for p in parts:
        for s in p["samples"]:
            slot = by_t.setdefault(round(s["t"]), {"t": s["t"], "open": 0, "in_flight": 0})
            slot["open"] += s["open"]
            slot["in_flight"] += s["in_flight"]
    merged["samples"] = list(by_t.values())
    return merged


class Capacity:
    def __init__(self, bench: Bench, model_url: str, db_url: str, pairs: Path) -> None:
        self.bench = bench
        self.plan = bench.plan
        self.model_url = model_url
        self.db_url = db_url
        self.pairs = pairs
        self.offset = 0  # conversations (and users) already used: new threads every level
        self.customers = len(json.loads(pairs.read_text()))

    def generate(self, name: str, url: str, label: str, extra: list[str], procs: int) -> Any:
        from benchmarks.procs import JWT_SECRET, PY, run_parallel

        outs, argvs = [], []
        for i in range(procs):
            out = self.bench.out / "runs" / f"capacity-{label}-{i}.json"
            out.parent.mkdir(exist_ok=True)
            outs.append(out)
            args = [
                "load",
                "--target",
                "peer" if name == "peer" else "ours",
                "--url",
                url,
                "--pairs",
                str(self.pairs),
                "--secret",
                JWT_SECRET,
                "--tag",
                f"cap{self.bench._tag('')}-{i}",
                "--turns",
                str(self.plan.capacity_turns),
                "--think-s",
                str(self.plan.capacity_think_s),
                "--seed",
                str(17 + i),
                "--index-offset",  # users: each process starts elsewhere in the list
                str(self.offset + i * (self.customers // procs)),
                *extra,
            ]
            argvs.append([PY, "-m", "benchmarks.capacity", *args, "--out", str(out)])
            self.bench.commands.setdefault(
                f"benchmarks.capacity:{extra[0]}",
                " ".join(["python -m benchmarks.capacity", *args]),
            )
        run_parallel(argvs, self.bench.out / "clients.log", timeout_s=900)
        return [json.loads(o.read_text()) for o in outs]

    def baseline(self, name: str, url: str, turns: int = 0) -> dict[str, Any]:
        from benchmarks.procs import Proc

        turns = turns or self.plan.capacity_single_turns
        proc: Proc = self.bench.procs[f"{name}@capacity"]
        idle0 = proc.cpu_s()
        time.sleep(3.0)
        idle_cores = (proc.cpu_s() - idle0) / 3.0  # the service's own background work
        cpu0 = proc.cpu_s()
        t0 = time.monotonic()
        [raw] = self.generate(name, url, f"{name}-single", ["--single", str(turns)], 1)
        cpu = proc.cpu_s() - cpu0
        busy_s = time.monotonic() - t0
        self.offset += -(-turns // self.plan.capacity_turns)  # its customers, one each
        latency = [t["latency_ms"] for t in raw["turns"] if t["ok"]]
        ttft = [t["ttft_ms"] for t in raw["turns"] if t["ok"] and t.get("ttft_ms") is not None]
        return {
            "turns": len(raw["turns"]),
            "errors": sum(not t["ok"] for t in raw["turns"]),
            "p50_ms": median(latency),
            "p95_ms": p95(latency),
            "ttft_p50_ms": median(ttft),
            "ttft_p95_ms": p95(ttft),
            "service_cpu_ms_per_turn": 1000 * cpu / max(len(latency), 1),
            "service_idle_cores": idle_cores,
            # less what the service burns while idle over the same time
            "service_cpu_ms_per_turn_net": 1000
            * (cpu - idle_cores * busy_s)
            / max(len(latency), 1),
        }

    def level(self, name: str, url: str, open_: int, pids: dict[str, int]) -> dict[str, Any]:
        from benchmarks.run import log

        procs = max(1, min(self.plan.capacity_procs, open_ // 100 or 1))
        plan = self.plan
        extra = [
            "--open",
            str(open_ // procs),
            "--warmup-s",
            str(plan.capacity_warmup_s),
            "--measure-s",
            str(plan.capacity_measure_s),
            "--turn-s",
            str(plan.capacity_turn_s),
        ]
        health = "/health" if name == "peer" else "/healthz"
        with Sampler(url, health, self.model_url, self.db_url, pids) as sampler:
            parts = self.generate(name, url, f"{name}-o{open_}", extra, procs)
        self.offset += sum(p["conversations"] for p in parts) + 1
        raw = _merge(parts)
        level = summarise_level(raw, sampler.samples)
        level["generator_procs"] = procs
        cores = level["probes"].get(f"cores_{name}", {}).get("mean")
        if cores is not None and level["turns_per_s"]:
            level["service_cpu_ms_per_turn"] = 1000 * cores / level["turns_per_s"]
        partial = self.bench.out / "runs" / f"capacity-{name}-o{open_}-summary.json"
        partial.write_text(json.dumps(level, indent=1))
        log(
            f"  capacity {name:5s} open={open_:<5d} open~{level['open_mean']:.0f}"
            f" in-flight~{level['in_flight_mean']:.1f} {level['turns_per_s']:.1f} turns/s"
            f" p95 {level['p95_ms']:.0f} ms ttft p95 {level['ttft_p95_ms']:.0f} ms"
            f" errors {level['errors']} gen {level['generator_cores']:.2f} cores"
        )
        return level

    def settle(self, name: str, url: str, pid: int, limit_s: float = 180.0) -> float:
        """Wait until the service is idle again (a collapsed level leaves runs queued after
        its clients gave up): its CPU under 0.05 cores over a second, and for ours no run
        active. Returns the seconds waited."""
        import psutil

        started = time.monotonic()
        process = psutil.Process(pid)
        while time.monotonic() - started < limit_s:
            t = process.cpu_times()
            before = t.user + t.system
            time.sleep(1.0)
            t = process.cpu_times()
            busy = t.user + t.system - before
            active = 0.0
            if name != "peer":
                _, text = Sampler._get(url, "/metrics")
                active = Sampler._gauges(text).get("active_runs", 0.0)
            if busy < 0.05 and not active:
                break
        return time.monotonic() - started

    def search(
        self, name: str, url: str, pids: dict[str, int], every: bool = False
    ) -> dict[str, Any]:
        """From the plan's first level up while levels hold, or down until one holds
        (`every`: each level of the plan, lowest first, to see past the knee)."""
        base = self.baseline(name, url)
        limit = HOLD_RATIO * base["p95_ms"]
        levels = sorted(self.plan.capacity_levels)
        i = 0 if every else levels.index(self.plan.capacity_start)
        tried: dict[int, dict[str, Any]] = {}

        def holds(entry: dict[str, Any]) -> bool:
            share = entry["errors"] / max(entry["turns"], 1)
            return bool(entry["p95_ms"] <= limit and share <= MAX_ERROR_SHARE)

        step = 0
        while 0 <= i < len(levels):
            settled = self.settle(name, url, pids[name])
            entry = self.level(name, url, levels[i], pids)
            entry["settled_s"] = settled
            entry["holds"] = holds(entry)
            entry["p95_ratio"] = entry["p95_ms"] / base["p95_ms"] if base["p95_ms"] else 0.0
            tried[levels[i]] = entry
            direction = 1 if entry["holds"] or every else -1
            if step and direction != step:
                break
            step = direction
            i += direction
        held = [n for n, e in tried.items() if e["holds"]]
        return {
            "baseline": base,
            "limit_ms": limit,
            "levels": {str(k): tried[k] for k in sorted(tried)},
            "held": max(held) if held else 0,
            "top_tried_holds": bool(held) and max(held) == max(levels),
        }


def section(
    bench: Bench,
    profile: dict[str, Any],
    only: Sequence[str] = ("ours", "peer"),
    every: bool = False,
) -> None:
    """Realistic capacity (issue 26): ours with the shipped defaults and the peer."""
    import psycopg

    from benchmarks.procs import JWT_SECRET, PY, Proc, free_port, run_checked, with_database
    from benchmarks.run import log

    plan = bench.plan
    if not plan.capacity_levels:
        return
    log(
        f"capacity: open conversations held, levels {list(plan.capacity_levels)} from"
        f" {plan.capacity_start}, think {plan.capacity_think_s} s"
    )
    dbname = f"{bench.dbname}_cap"
    db_url = with_database(bench.admin_url, dbname)
    with psycopg.connect(bench.admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        argv = [PY, "-m", "benchmarks.capacity", "seed", "--database-url", db_url]
        argv += ["--customers", str(plan.capacity_customers)]
        run_checked(argv, {}, bench.out / "seed-capacity.log")
        with psycopg.connect(db_url) as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (customer_id) customer_id, id FROM orders"
                " ORDER BY customer_id, id"
            ).fetchall()
        pairs = bench.out / "pairs-capacity.json"
        pairs.write_text(json.dumps([list(r) for r in rows]))

        port = free_port()
        model_url = f"http://127.0.0.1:{port}/v1"
        argv = [PY, "-m", "tests.fakellm", "--port", str(port), "--policy", MODEL_POLICY]
        argv += ["--ttft-ms", str(profile["ttft_ms"]), "--tps", str(profile["tps"])]
        model = "model@capacity"
        bench.start(Proc(model, argv, {}, bench.out / "model-capacity.log", f"{model_url}/models"))
        # the shipped defaults: nothing but where things are (no limits lifted, no workers)
        env = {
            "DATABASE_URL": db_url,
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "x",
            "LOG_LEVEL": "WARNING",
            "JWT_SECRET": JWT_SECRET,
        }
        systems: dict[str, str] = {}
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = [PY, "-m", "app", "serve", "--no-seed", "--port", str(port)]
        bench.start(
            Proc("ours@capacity", argv, env, bench.out / "ours-capacity.log", url + "/healthz")
        )
        systems["ours"] = url
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = [PY, "-m", "benchmarks.baseline", "--port", str(port)]
        peer_env = {k: env[k] for k in ("DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
        if "peer" in only:
            log_file = bench.out / "peer-capacity.log"
            bench.start(Proc("peer@capacity", argv, peer_env, log_file, url + "/health"))
            systems["peer"] = url

        cap = Capacity(bench, model_url, db_url, pairs)
        results: dict[str, Any] = {
            "profile": profile.get("label"),
            "think_s": plan.capacity_think_s,
            "think_spread_s": THINK_SPREAD_S,
            "turns_per_conversation": plan.capacity_turns,
            "warmup_s": plan.capacity_warmup_s,
            "measure_s": plan.capacity_measure_s,
            "customers": len(rows),
            "hold_ratio": HOLD_RATIO,
            "systems": {},
        }
        for name, url in systems.items():
            proc_name = f"{name}@capacity"
            pids = {name: bench.procs[proc_name].pid, "model": bench.procs[model].pid}
            cap.baseline(name, url, 6)  # warm-up: connections, prepared statements, caches
            results["systems"][name] = cap.search(name, url, pids, every)
            bench.stop(proc_name)
        bench.results["capacity"] = results
    finally:
        bench.stop("ours@capacity", "peer@capacity", "model@capacity")
        with psycopg.connect(bench.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def run_alone(args: argparse.Namespace) -> None:
    """`python -m benchmarks.capacity run [--quick]`: the section on its own; results in
    benchmarks/out/<stamp>-capacity/ (results.json, capacity.md)."""
    import dataclasses
    import os

    from benchmarks import report
    from benchmarks.config import FULL, QUICK
    from benchmarks.procs import DEFAULT_ADMIN_URL, ROOT
    from benchmarks.run import PROFILES, Bench, log

    plan = QUICK if args.quick else FULL
    if args.levels:
        levels = tuple(int(x) for x in args.levels.split(","))
        start = args.start if args.start in levels else levels[0]
        plan = dataclasses.replace(plan, capacity_levels=levels, capacity_start=start)
    out = ROOT / "benchmarks" / "out" / f"{time.strftime('%Y%m%d-%H%M%S')}-capacity"
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(plan, out, os.environ.get("DATABASE_URL") or DEFAULT_ADMIN_URL)
    try:
        section(bench, PROFILES["realistic"], args.systems.split(","), args.every)
    finally:
        bench.stop_all()
    (out / "results.json").write_text(json.dumps(bench.results, indent=1, default=str))
    text = "\n".join(report.section_capacity(bench.results))
    (out / "capacity.md").write_text(text)
    print(text)
    log(f"wrote {out / 'capacity.md'}")


MODEL_POLICY = "benchmarks.policy:OrderLookup"
THINK_SPREAD_S = 5.0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    load = sub.add_parser("load", help="the open-loop load generator")
    load.add_argument("--target", choices=["ours", "peer"], required=True)
    load.add_argument("--url", required=True)
    load.add_argument("--pairs", required=True, help="JSON file: [[user_id, order_id], ...]")
    load.add_argument("--secret", default="")
    load.add_argument("--tag", default="cap")
    load.add_argument("--out", required=True)
    load.add_argument("--open", type=int, default=0, help="open conversations to hold")
    load.add_argument("--turns", type=int, default=4, help="messages per conversation")
    load.add_argument("--think-s", type=float, default=20.0)
    load.add_argument("--think-spread-s", type=float, default=THINK_SPREAD_S)
    load.add_argument(
        "--turn-s", type=float, default=1.2, help="a turn's expected time (for the rate)"
    )
    load.add_argument("--warmup-s", type=float, default=25.0)
    load.add_argument("--measure-s", type=float, default=40.0)
    load.add_argument("--drain-s", type=float, default=60.0)
    load.add_argument("--seed", type=int, default=17)
    load.add_argument("--index-offset", type=int, default=0, help="first conversation's index")
    load.add_argument("--single", type=int, default=0, help="one customer, this many turns")
    load.add_argument("--pause-s", type=float, default=0.3, help="--single: between turns")
    alone = sub.add_parser("run", help="this section alone, as `make bench` runs it")
    alone.add_argument("--quick", action="store_true", help="the --quick plan's levels")
    alone.add_argument("--levels", help="comma-separated open conversations (overrides)")
    alone.add_argument("--start", type=int, help="the level to start from")
    alone.add_argument("--systems", default="ours,peer", help="comma-separated: ours, peer")
    alone.add_argument(
        "--every", action="store_true", help="run every level (past the knee: overload)"
    )
    seed = sub.add_parser("seed", help="migrate and load a shop of --customers customers")
    seed.add_argument("--database-url", required=True)
    seed.add_argument("--customers", type=int, default=2000)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode == "seed":
        asyncio.run(seed_shop(args.database_url, args.customers))
    elif args.mode == "run":
        run_alone(args)
    else:
        generate_main(args)


if __name__ == "__main__":
    main()
