"""`make bench`: run every benchmark and write benchmarks/RESULTS.md.

    .venv/bin/python -m benchmarks.run            # full run (about 25 minutes on 2 cores,
                                                  # and ~20 more for the section `scale`)
    .venv/bin/python -m benchmarks.run --quick    # smoke run, ~6 minutes (out/RESULTS-quick.md)

Postgres is DATABASE_URL's server, else postgres@127.0.0.1:5432 (trust). A fresh database
csagent_bench_<pid> is created, seeded once and dropped at the end. Raw results and logs go
to benchmarks/out/<stamp>/; `python -m benchmarks.report <results.json>` re-renders them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import (
    actions_cost,
    capacity,
    features,
    lg_cost,
    machine,
    profiling,
    retention,
    roundtrips,
    scale_section,
    summary,
)
from benchmarks.config import FULL, QUICK, Plan
from benchmarks.pgceiling import pgbench_ceiling
from benchmarks.procs import (
    DEFAULT_ADMIN_URL,
    JWT_SECRET,
    PY,
    ROOT,
    CpuWatch,
    Proc,
    RssSampler,
    free_port,
    run_checked,
    run_parallel,
    with_database,
)
from benchmarks.report import write_report

PROFILES: dict[str, dict[str, Any]] = {
    "instant": {"ttft_ms": 0, "tps": None, "label": "instant (no latency)"},
    "realistic": {
        "ttft_ms": 300,
        "tps": 40,
        "label": "realistic (300 ms to first token, 40 tokens/s)",
    },
    # item 4 only: slow enough that 200 streams are open at the same time
    "slow": {"ttft_ms": 1000, "tps": 5, "label": "slow (1 s to first token, 5 tokens/s)"},
}
MODEL_POLICY = "benchmarks.policy:OrderLookup"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Bench:
    def __init__(self, plan: Plan, out: Path, admin_url: str) -> None:
        self.plan = plan
        self.out = out
        self.admin_url = admin_url
        self.dbname = f"csagent_bench_{os.getpid()}"
        self.db_url = with_database(admin_url, self.dbname)
        self.pairs_file = out / "pairs.json"
        self.procs: dict[str, Proc] = {}
        self.commands: dict[str, str] = {}
        self.results: dict[str, Any] = {"plan": plan.name, "profiles": PROFILES}
        self._runs = 0
        self.otlp_url: str | None = None  # --trace: every service traces to this sink

    # --- processes ------------------------------------------------------------------------

    def start(self, proc: Proc) -> Proc:
        log(f"starting {proc.name}")
        self.procs[proc.name] = proc.start()
        self.commands.setdefault(proc.name.split("@")[0], proc.command)
        return proc

    def stop(self, *names: str) -> None:
        for name in names:
            proc = self.procs.pop(name, None)
            if proc is not None:
                proc.stop()

    def stop_all(self) -> None:
        self.stop(*list(self.procs))

    def model(self, profile: str) -> str:
        port = free_port()
        spec = PROFILES[profile]
        argv = [PY, "-m", "tests.fakellm", "--port", str(port), "--policy", MODEL_POLICY]
        if spec["ttft_ms"]:
            argv += ["--ttft-ms", str(spec["ttft_ms"])]
        if spec["tps"]:
            argv += ["--tps", str(spec["tps"])]
        url = f"http://127.0.0.1:{port}/v1"
        self.start(
            Proc(
                f"model@{profile}",
                argv,
                {},
                self.out / f"model-{profile}.log",
                ready_url=f"{url}/models",
            )
        )
        return url

    def service_env(self, model_url: str) -> dict[str, str]:
        return {
            "DATABASE_URL": self.db_url,
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "x",
            "WRITE_CONFIRMATION": "off",
            "LOG_LEVEL": "WARNING",
            "JWT_SECRET": JWT_SECRET,
            # A benchmark customer posts thousands of turns back to back (a long thread's 400
            # messages, every level's runs): the post rate is still checked, with a burst it
            # never reaches, so its cost is measured. The token budget is off: summing a
            # day of thousands of runs per customer would measure no real customer.
            "RATE_LIMIT_POSTS_BURST": "1000000",
            "TOKEN_BUDGET_PER_DAY": "0",
        } | ({"OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_url} if self.otlp_url else {})

    def trace_to_sink(self) -> None:
        """--trace: an OTLP sink (benchmarks/otlp_sink.py) that every service exports to."""
        port = free_port()
        argv = [PY, "-m", "benchmarks.otlp_sink", "--port", str(port)]
        url = f"http://127.0.0.1:{port}"
        self.start(Proc("otlp-sink", argv, {}, self.out / "otlp-sink.log", ready_url=url))
        self.otlp_url = url

    def ours(
        self, model_url: str, name: str = "ours", variant: str | None = None, workers: int = 1
    ) -> str:
        port = free_port()
        module = "app" if variant is None else "benchmarks.variant"
        argv = [PY, "-m", module, "serve", "--no-seed", "--port", str(port)]
        argv += ["--workers", str(workers)]  # the default is one per core
        url = f"http://127.0.0.1:{port}"
        env = self.service_env(model_url)
        if variant is not None:
            env["BENCH_VARIANT"] = variant
        self.start(
            Proc(
                name,
                argv,
                env,
                self.out / f"{name}.log",
                ready_url=f"{url}/healthz",
            )
        )
        return url

    def thin(self, model_url: str, checkpointer: str) -> str:
        """benchmarks/thin.py: the thinnest HTTP + SSE service around the same graph."""
        port = free_port()
        name = f"thin-{checkpointer}"
        argv = [PY, "-m", "benchmarks.thin", "--port", str(port), "--checkpointer", checkpointer]
        url = f"http://127.0.0.1:{port}"
        env = self.service_env(model_url)
        self.start(Proc(name, argv, env, self.out / f"{name}.log", ready_url=f"{url}/healthz"))
        return url

    def peer(self, model_url: str) -> str:
        port = free_port()
        argv = [PY, "-m", "benchmarks.baseline", "--port", str(port)]
        env = {
            k: v
            for k, v in self.service_env(model_url).items()
            if k in ("DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
        }
        url = f"http://127.0.0.1:{port}"
        self.start(Proc("peer", argv, env, self.out / "peer.log", ready_url=f"{url}/health"))
        return url

    # --- the database ---------------------------------------------------------------------

    def create_database(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}"')
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        log(f"created database {self.dbname}; seeding")
        env = {"DATABASE_URL": self.db_url, "LOG_LEVEL": "WARNING"}
        run_checked([PY, "-m", "app", "seed"], env, self.out / "seed.log")
        self.commands["seed"] = f"DATABASE_URL={self.db_url} python -m app seed"
        with psycopg.connect(self.db_url) as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (customer_id) customer_id, id FROM orders"
                " ORDER BY customer_id, id"
            ).fetchall()
        self.pairs_file.write_text(json.dumps([list(r) for r in rows]))
        self.results["customers_with_orders"] = len(rows)

    def drop_database(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        log(f"dropped database {self.dbname}")

    # --- runs of the separate client processes ---------------------------------------------

    def _tag(self, prefix: str) -> str:
        self._runs += 1
        return f"{prefix}{self._runs}"

    def client(self, module: str, args: list[str], watch: list[str], label: str) -> dict[str, Any]:
        """Run `python -m <module> <args> --out F` while timing the CPU of `watch` procs."""
        out_file = self.out / "runs" / f"{label}.json"
        out_file.parent.mkdir(exist_ok=True)
        argv = [PY, "-m", module, *args, "--out", str(out_file)]
        with CpuWatch({n: self.procs[n] for n in watch}) as cpu:
            run_checked(argv, {}, self.out / "clients.log", timeout_s=900)
        result: dict[str, Any] = json.loads(out_file.read_text())
        result["cpu"] = cpu.summary({"client": float(result.get("cpu_s", 0.0))})
        self.commands.setdefault(
            module + ":" + label.split("-")[0], " ".join(["python", "-m", module, *args])
        )
        return result

    def load(
        self,
        target: str,
        url: str,
        customers: int,
        total: int,
        watch: list[str],
        label: str,
        *,
        keep_raw: bool = False,
    ) -> dict[str, Any]:
        args = [
            "load",
            "--target",
            "ours" if target != "peer" else "peer",
            "--url",
            url,
            "--pairs",
            str(self.pairs_file),
            "--secret",
            JWT_SECRET,
            "--customers",
            str(customers),
            "--total-turns",
            str(total),
            "--turns",
            str(self.plan.turns_per_conversation),
            "--tag",
            self._tag(label),
        ]
        raw = self.client("benchmarks.loadgen", args, watch, f"{label}-{self._runs}")
        run = summary.load_run(raw, server=target if target in raw["cpu"] else None)
        if keep_raw:
            run["raw_turns"] = raw["turns"]
        return run

    def total_turns(self, customers: int) -> int:
        return max(self.plan.min_turns, 2 * self.plan.turns_per_conversation * customers)

    # --- the sections ---------------------------------------------------------------------

    def warm_up(self, targets: dict[str, str], turns: int | None = None) -> None:
        turns = turns or self.plan.warmup_turns
        for target, url in targets.items():
            self.load(target, url, min(4, turns), turns, [target], f"warmup_{target}")

    def section_overhead(self, ours_url: str, model_url: str) -> None:
        log("item 1: service overhead per turn (HTTP + SSE vs in-process)")
        runs = []
        for rep in range(self.plan.overhead_reps):
            args = [
                "--url",
                ours_url,
                "--database-url",
                self.db_url,
                "--model-url",
                model_url,
                "--secret",
                JWT_SECRET,
                "--pairs",
                str(self.pairs_file),
                "--turns",
                str(self.plan.overhead_turns),
                "--tag",
                self._tag("ovh"),
            ]
            raw = self.client("benchmarks.overhead", args, ["ours"], f"overhead-{rep}")
            runs.append(summary.overhead_run(raw))
        self.results["overhead"] = runs

    def section_load(
        self,
        profile: str,
        levels: Sequence[int],
        reps: dict[int, int],
        urls: dict[str, str],
        model: str | None = None,
    ) -> None:
        model = model or f"model@{profile}"
        log(f"item 2: load, {profile}, levels {list(levels)}")
        table: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for customers in levels:
            table[str(customers)] = {name: [] for name in urls}
            for rep in range(reps[customers]):
                names = list(urls)
                order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate A/B
                for name in order:
                    run = self.load(
                        name,
                        urls[name],
                        customers,
                        self.total_turns(customers),
                        [name, model],
                        f"{profile}_{name}_c{customers}",
                    )
                    table[str(customers)][name].append(run)
                    log(f"  {name:8s} c={customers:<4d} {summary.one_line(run)}")
        self.results.setdefault("load", {})[profile] = table

    def section_profile(self, ours_url: str) -> None:
        if self.plan.profile_s <= 0:
            return
        if profiling.py_spy() is None:
            self.results["profile"] = {"skipped": "py-spy is not installed (pip install py-spy)"}
            return
        log("profile: py-spy on our service at 32 customers")
        recorders = profiling.start(self.procs["ours"].pid, self.out, self.plan.profile_s)
        assert recorders is not None
        time.sleep(1.0)
        deadline = time.monotonic() + self.plan.profile_s - 2
        while time.monotonic() < deadline:
            self.load("ours", ours_url, 32, 96, ["ours"], "profile_ours_c32")
        profiling.finish(recorders, self.plan.profile_s + 30)
        self.results["profile"] = profiling.summarise(self.out / "profile.txt")
        self.results["profile"]["files"] = ["profile.svg", "profile.txt"]

    def section_long(self, ours_url: str) -> None:
        log(f"item 3: long threads {list(self.plan.long_levels)}")
        args = [
            "long",
            "--url",
            ours_url,
            "--pairs",
            str(self.pairs_file),
            "--secret",
            JWT_SECRET,
            "--database-url",
            self.db_url,
            "--levels",
            ",".join(map(str, self.plan.long_levels)),
            "--threads-per-level",
            str(self.plan.long_threads),
            "--tag",
            self._tag("long"),
        ]
        if not self.plan.long_pg_stats:
            args.append("--no-pg-stats")
        raw = self.client("benchmarks.loadgen", args, ["ours"], "long")
        self.results["long"] = summary.long_run(raw)

    def section_ceiling_a(
        self, model_url: str, service: tuple[str, str], processes: int = 1
    ) -> None:
        """The graph with InMemorySaver, in `processes` processes at once (customers split
        between them): the ceiling for a service with as many worker processes. Each run
        alternates with a run of `service` (name, url) at the same load, so the share of the
        ceiling compares runs minutes apart at most on a machine whose speed drifts. With one
        process, each rep also runs the graph in-process with the service's Postgres
        checkpointer: what a durable checkpoint costs before any HTTP."""
        log(f"ceiling (a): the same graph in-process with InMemorySaver, {processes} process(es)")
        runs, paired, durable = [], [], []
        customers = self.plan.ceiling_customers
        total = self.total_turns(customers)
        name, url = service
        watch = [name, "model@instant"]
        for rep in range(self.plan.ceiling_reps):
            if rep % 2:
                paired.append(self.load(name, url, customers, total, watch, f"paired_{name}"))
            runs.append(
                self.in_process(model_url, "memory", processes, f"ceiling_a-p{processes}-{rep}")
            )
            if processes == 1:
                durable.append(
                    self.in_process(model_url, "postgres", 1, f"ceiling_a-durable-{rep}")
                )
            if not rep % 2:
                paired.append(self.load(name, url, customers, total, watch, f"paired_{name}"))
        key = "ceiling_a" if processes == 1 else "ceiling_a_procs"
        self.results[key] = {
            "customers": customers,
            "processes": processes,
            "runs": runs,
            "paired": {"name": name, "runs": paired},
        }
        if durable:
            self.results[key]["durable"] = durable

    def in_process(
        self, model_url: str, checkpointer: str, processes: int, label: str
    ) -> dict[str, Any]:
        """One load run of `benchmarks.inproc` at the ceiling's load, the customers split
        over `processes` processes running at once."""
        customers = self.plan.ceiling_customers
        total = self.total_turns(customers)
        argvs, outs = [], []
        for i in range(processes):
            out_file = self.out / "runs" / f"{label}-{i}.json"
            out_file.parent.mkdir(exist_ok=True)
            outs.append(out_file)
            args = [
                "--database-url",
                self.db_url,
                "--model-url",
                model_url,
                "--checkpointer",
                checkpointer,
                "--stream",
                "--pairs",
                str(self.pairs_file),
                "--customers",
                str(customers // processes),
                "--total-turns",
                str(total // processes),
                "--turns",
                str(self.plan.turns_per_conversation),
                "--tag",
                self._tag(f"{checkpointer[:3]}{i}-"),
            ]
            argvs.append([PY, "-m", "benchmarks.inproc", *args, "--out", str(out_file)])
            self.commands.setdefault(
                f"benchmarks.inproc:{label.rsplit('-', 1)[0]}",
                f"{processes} x python -m benchmarks.inproc " + " ".join(args),
            )
        with CpuWatch({"model@instant": self.procs["model@instant"]}) as cpu:
            run_parallel(argvs, self.out / "clients.log", timeout_s=900)
        parts = [json.loads(f.read_text()) for f in outs]
        raw = {
            "turns": [t for p in parts for t in p["turns"]],
            "elapsed_s": max(p["elapsed_s"] for p in parts),
            "cpu": cpu.summary({"client": sum(float(p["cpu_s"]) for p in parts)}),
        }
        return summary.load_run(raw, server="client")

    def section_ceiling_b(self) -> None:
        log("ceiling (b): pgbench single-row inserts")
        self.results["ceiling_b"] = pgbench_ceiling(
            self.admin_url,
            f"{self.dbname}_pgbench",
            self.out,
            clients=8,
            jobs=2,
            seconds=self.plan.pgbench_seconds,
        )

    def section_variant(self, urls: dict[str, str]) -> None:
        if self.plan.variant_reps <= 0 or len(urls) < 2:
            return
        log(f"proposed changes, measured: {', '.join(list(urls)[1:])}")
        levels = self.plan.variant_levels
        reps = dict.fromkeys(levels, self.plan.variant_reps)
        self.section_load("variant", levels, reps, urls, model="model@instant")
        self.results["variant"] = self.results["load"].pop("variant")

    def section_thin(self, urls: dict[str, str]) -> None:
        """Ceiling (c): the thin services beside ours, rotating, at 32 customers."""
        if self.plan.thin_reps <= 0:
            return
        log("ceiling (c): the thinnest HTTP + SSE service around the same graph")
        self.warm_up({name: url for name, url in urls.items() if name != "ours"})
        self.section_load("thin", (32,), {32: self.plan.thin_reps}, urls, model="model@instant")
        self.results["thin"] = self.results["load"].pop("thin")

    def section_memory(self, name: str, url: str) -> None:
        streams = self.plan.hold_streams
        log(f"item 4: RSS of {name} with {streams} open SSE streams (slow model)")
        proc = self.procs[name]
        time.sleep(0.5)
        idle = proc.rss_mb()
        with RssSampler(proc.pid) as sampler:
            raw_run = self.load(name, url, streams, streams, [name], f"hold_{name}", keep_raw=True)
        self.results.setdefault("memory", {})[name] = summary.memory_run(
            raw_run, sampler.samples, idle, proc.rss_mb(), streams
        )


@contextmanager
def services(
    bench: Bench,
    profile: str,
    *,
    peer: bool = True,
    variants: Sequence[tuple[str, str]] = (),
    workers: int = 1,
    thin: bool = False,
) -> Iterator[dict[str, str]]:
    model_url = bench.model(profile)
    urls = {"model": model_url, "ours": bench.ours(model_url)}
    if workers > 1:  # the shipped multi-process mode: `serve --workers N`
        urls[f"ours-{workers}w"] = bench.ours(model_url, name=f"ours-{workers}w", workers=workers)
    if peer:
        urls["peer"] = bench.peer(model_url)
    for name, change in variants:
        urls[name] = bench.ours(model_url, name=name, variant=change)
    if thin:
        for checkpointer in ("memory", "postgres"):
            urls[f"thin-{checkpointer}"] = bench.thin(model_url, checkpointer)
    try:
        yield urls
    finally:
        bench.stop(*[n for n in bench.procs if not n.startswith("model@")])
        bench.stop(f"model@{profile}")


def run_all(bench: Bench) -> None:
    plan = bench.plan
    bench.create_database()
    variants = plan.variants if plan.variant_reps > 0 else ()
    workers = machine.cores()
    thin = plan.thin_reps > 0
    with services(bench, "instant", variants=variants, workers=workers, thin=thin) as urls:
        systems = {name: url for name, url in urls.items() if name in ("ours", "peer")}
        if workers > 1:
            systems[f"ours-{workers}w"] = urls[f"ours-{workers}w"]
        bench.warm_up(systems)
        bench.section_overhead(urls["ours"], urls["model"])
        bench.section_load("instant", plan.levels, plan.level_reps, systems)
        bench.section_ceiling_a(urls["model"], ("ours", urls["ours"]))
        if workers > 1:
            name = f"ours-{workers}w"
            bench.section_ceiling_a(urls["model"], (name, urls[name]), processes=workers)
        if variants:
            names = ["ours", *(name for name, _ in variants)]
            bench.warm_up({name: urls[name] for name in names[1:]})
            bench.section_variant({name: urls[name] for name in names})
            bench.stop(*names[1:])
        if thin:
            bench.section_thin(
                {name: urls[name] for name in ("ours", "thin-memory", "thin-postgres")}
            )
            bench.stop("thin-memory", "thin-postgres")
        # Only `ours` from here on. Each process keeps the pool its heaviest load grew (up
        # to DB_POOL_MAX): nine of them held more than the shared server's 100 connections,
        # and the long-thread section's own connection was refused ("too many clients").
        bench.stop("peer", f"ours-{workers}w")
        bench.section_profile(urls["ours"])
        section_lg_cost(bench, urls["ours"])
        bench.section_long(urls["ours"])
    bench.section_ceiling_b()
    with services(bench, "realistic") as urls:
        bench.warm_up({"ours": urls["ours"], "peer": urls["peer"]})
        reps = dict.fromkeys(plan.realistic_levels, plan.realistic_reps)
        bench.section_load(
            "realistic", plan.realistic_levels, reps, {"ours": urls["ours"], "peer": urls["peer"]}
        )
    capacity.section(bench, PROFILES["realistic"])
    section_roundtrips(bench)
    if plan.scale_parts:
        log("section scale: one Postgres primary (a private cluster)")
        scale_section.section(bench, plan.scale_parts)
    with services(bench, "slow") as urls:
        bench.warm_up({"ours": urls["ours"], "peer": urls["peer"]}, turns=2)
        bench.section_memory("ours", urls["ours"])
        bench.section_memory("peer", urls["peer"])
    if plan.name == "full":
        log("section 6: cache, text observations and summaries on/off (in-process)")
        bench.results["features_md"] = asyncio.run(features.main())
    section_retention(bench)
    section_actions(bench)


def section_roundtrips(bench: Bench) -> None:
    """Statements and round trips per read and write turn (benchmarks/roundtrips.py), on a
    private cluster with pg_stat_statements."""
    if bench.plan.roundtrip_turns <= 0:
        return
    log("round trips per turn: a private cluster with pg_stat_statements")
    logs = bench.out / "roundtrips"
    logs.mkdir(exist_ok=True)
    turns = bench.plan.roundtrip_turns
    try:
        bench.results["roundtrips"] = roundtrips.run(turns, roundtrips.WARMUP, logs)
    except (RuntimeError, OSError, TimeoutError) as error:  # e.g. no PostgreSQL binaries
        bench.results["roundtrips"] = {"skipped": f"{type(error).__name__}: {error}"}
    bench.commands["benchmarks.roundtrips"] = f"python -m benchmarks.roundtrips --turns {turns}"


def section_lg_cost(bench: Bench, url: str) -> None:
    """A turn through the LangGraph API (/lg runs.stream) against the native POST
    (benchmarks/lg_cost.py), on the instant service."""
    turns = 60 if bench.plan.name == "full" else 20
    log(f"/lg vs native: {turns} read turns each way, one customer")
    user, order = json.loads(bench.pairs_file.read_text())[0]
    pid = bench.procs["ours"].pid
    bench.results["lg_cost"] = asyncio.run(lg_cost.measure(url, pid, user, order, turns))
    bench.commands["benchmarks.lg_cost"] = f"python -m benchmarks.lg_cost --turns {turns}"


def section_retention(bench: Bench) -> None:
    """Section 7 (benchmarks/retention.py), rendered after section 6's markdown."""
    log("section 7: retention, bytes per 1,000 turns and a simulated year (in-process)")
    conversations, per_day = (16, 6) if bench.plan.name == "full" else (6, 2)
    text = asyncio.run(retention.main(conversations, per_day))
    bench.results["features_md"] = (bench.results.get("features_md") or "") + "\n" + text
    bench.commands["benchmarks.retention"] = (
        f"python -m benchmarks.retention --conversations {conversations}"
        f" --threads-per-day {per_day}"
    )


def section_actions(bench: Bench) -> None:
    """A read through an MCP server and an OpenAPI operation against a built-in read
    (benchmarks/actions_cost.py, docs/actions.md), after section 7's markdown."""
    log("your own actions: a remote read against a built-in one (in-process)")
    n = 300 if bench.plan.name == "full" else 50
    text = asyncio.run(actions_cost.main(n))
    bench.results["features_md"] = (bench.results.get("features_md") or "") + "\n" + text
    bench.commands["benchmarks.actions_cost"] = f"python -m benchmarks.actions_cost --n {n}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smoke run, about 6 minutes")
    parser.add_argument(
        "--results",
        default=None,
        help="where to write the report (default: benchmarks/RESULTS.md; with --quick,"
        " benchmarks/out/RESULTS-quick.md so a smoke run never replaces the real figures)",
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="the services trace every run (OTLP to a sink that keeps nothing); the report"
        " goes to benchmarks/out/RESULTS-traced.md unless --results says otherwise",
    )
    return parser.parse_args(argv)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`: processes stopped, db dropped


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.results is None:
        name = "out/RESULTS-quick.md" if args.quick else "RESULTS.md"
        name = "out/RESULTS-traced.md" if args.trace else name
        args.results = str(ROOT / "benchmarks" / name)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background
        signal.signal(signal.SIGINT, signal.default_int_handler)
    plan = QUICK if args.quick else FULL
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = ROOT / "benchmarks" / "out" / f"{stamp}-{plan.name}"
    out.mkdir(parents=True, exist_ok=True)
    admin_url = os.environ.get("DATABASE_URL") or DEFAULT_ADMIN_URL
    bench = Bench(plan, out, admin_url)
    bench.results["machine"] = machine.describe(admin_url)
    bench.results["machine"]["load_before"] = machine.load_now()
    log(f"{plan.name} run; raw results in {out}")
    started = time.monotonic()
    try:
        if args.trace:
            bench.trace_to_sink()
        run_all(bench)
    finally:
        bench.stop_all()
        if not args.keep_db:
            bench.drop_database()
    bench.results["duration_s"] = time.monotonic() - started
    bench.results["commands"] = bench.commands
    bench.results["command"] = (
        ".venv/bin/python -m benchmarks.run --quick"
        if args.quick
        else "make bench   (= .venv/bin/python -m benchmarks.run)"
    )
    (out / "results.json").write_text(json.dumps(bench.results, indent=1, default=str))
    write_report(bench.results, Path(args.results))
    log(f"done in {bench.results['duration_s']:.0f}s; wrote {args.results}")


if __name__ == "__main__":
    main()
