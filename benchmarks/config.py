"""How much each section runs: the full `make bench`, and `--quick` for a smoke run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    name: str
    overhead_reps: int  # item 1: repeated runs of paired turns
    overhead_turns: int
    levels: tuple[int, ...]  # item 2, instant model: concurrent customers
    level_reps: dict[int, int]  # repeated runs per level (ours and peer alternating)
    # turns per run at least (two conversations per customer at least): runs of a few
    # seconds, so the ramp-up and the last stragglers are a small part of each
    min_turns: int
    realistic_levels: tuple[int, ...]
    realistic_reps: int
    long_levels: tuple[int, ...]  # item 3: messages of history
    long_threads: int  # measured turns (one per thread) per level
    long_pg_stats: bool  # count statements via pg_stat_* (needs ~12 s of quiet per read)
    hold_streams: int  # item 4
    ceiling_reps: int  # item 5a
    ceiling_customers: int
    pgbench_seconds: int  # item 5b
    profile_s: int  # py-spy seconds (0: no profile)
    variant_reps: int  # proposed-fix variant at the same load (0: skip)
    thin_reps: int  # ceiling (c), benchmarks/thin.py beside ours at 32 customers (0: skip)
    variant_levels: tuple[int, ...] = (1, 32)
    # name -> BENCH_VARIANT of benchmarks/variant.py (our service with a proposed change)
    variants: tuple[tuple[str, str], ...] = (
        ("lockless", "lockless"),
        ("async", "async"),
    )
    warmup_turns: int = 12
    turns_per_conversation: int = 3
    # realistic capacity (benchmarks/capacity.py): open conversations stepped from
    # capacity_start up while they hold, or down until one holds (empty: skip)
    capacity_levels: tuple[int, ...] = (250, 500, 625, 750, 875, 1000, 1250, 1500)
    capacity_start: int = 500
    capacity_think_s: float = 20.0  # uniform +- 5 s between an answer and the next message
    capacity_turns: int = 4  # messages per conversation
    capacity_turn_s: float = 1.2  # a turn's expected time, for the arrival rate
    capacity_warmup_s: float = 20.0
    capacity_measure_s: float = 40.0
    capacity_single_turns: int = 30  # the one-customer baseline
    capacity_procs: int = 2  # load generator processes at most (one per 100 open at least)
    capacity_customers: int = 2000  # the shop of the section's own database
    roundtrip_turns: int = 10  # benchmarks/roundtrips.py, turns of each kind (0: skip)
    # section `scale` (benchmarks/scale_section.py; empty parts: skip)
    scale_parts: tuple[str, ...] = ("pg", "idle", "cross", "workers")
    scale_pg_reads: int = 300  # read turns per system (and as many write turns as pending
    scale_pg_writes: int = 150  # orders allow, up to this)
    scale_pg_concurrency: int = 4
    scale_pg_rounds: int = 3  # the turns split into rounds, the systems alternating
    scale_idle_replicas: tuple[int, ...] = (1, 4, 8)
    scale_idle_window_s: float = 30.0
    scale_cross_tries: int = 30
    scale_worker_reps: int = 5
    scale_worker_turns: int = 400


FULL = Plan(
    name="full",
    overhead_reps=4,
    overhead_turns=15,
    levels=(1, 8, 32, 128),
    level_reps={1: 3, 8: 2, 32: 3, 128: 2},
    min_turns=400,
    realistic_levels=(32,),
    realistic_reps=2,
    long_levels=(4, 40, 400),
    long_threads=24,
    long_pg_stats=True,
    hold_streams=200,
    ceiling_reps=3,
    ceiling_customers=32,
    pgbench_seconds=10,
    profile_s=20,
    variant_reps=3,
    # ceiling (c) is a ratio of two noisy medians: seven runs each, alternating
    thin_reps=7,
)

QUICK = Plan(
    name="quick",
    overhead_reps=2,
    overhead_turns=6,
    levels=(1, 32),
    level_reps={1: 1, 32: 1},
    min_turns=60,
    realistic_levels=(8,),
    realistic_reps=1,
    long_levels=(4, 40, 400),
    long_threads=1,
    long_pg_stats=False,
    hold_streams=50,
    ceiling_reps=1,
    ceiling_customers=32,
    pgbench_seconds=3,
    profile_s=0,
    variant_reps=0,
    thin_reps=1,
    warmup_turns=4,
    capacity_levels=(100, 200),
    capacity_start=200,
    capacity_warmup_s=10.0,
    capacity_measure_s=15.0,
    capacity_single_turns=10,
    capacity_customers=400,
    roundtrip_turns=3,
    scale_pg_reads=30,
    scale_pg_writes=20,
    scale_pg_rounds=2,
    scale_idle_replicas=(1, 4),
    scale_idle_window_s=10.0,
    scale_cross_tries=8,
    scale_worker_reps=2,
    scale_worker_turns=200,
)
