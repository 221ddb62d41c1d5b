"""The `scale` section's markdown (benchmarks/scale_section.py's results)."""

from __future__ import annotations

from typing import Any

from benchmarks.pg_share import KINDS
from benchmarks.stats import fmt, median

PRIMARY_CORES = 16
CEILING = 0.70  # the share of the primary's CPU the projection lets turns use
MESSAGE_EVERY_S = 20.0  # human pace: one message per ~20 s per open conversation
TARGET_IDLE_XACTS = 0.5  # at most one transaction every 2 s per replica
TARGET_TOP_SHARE = 0.60
TARGET_SPEEDUP = 1.6


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _short(query: str, width: int = 90) -> str:
    return query if len(query) <= width else query[: width - 3] + "..."


def render(s: dict[str, Any], alone: bool = False) -> str:
    lines = ["## Scale on one Postgres", ""]
    if "skipped" in s:
        return "\n".join([*lines, f"Skipped: {s['skipped']}.", ""])
    load0, load1 = s["load_before"], s.get("load_after", {})
    pg = s.get("postgres", {})
    run = (
        f"Run alone (`python -m benchmarks.scale_section`) on {s['date']}, not with the rest of"
        " this file."
        if alone
        else f"Run on {s['date']} (`python -m benchmarks.scale_section` runs it alone)."
    )
    if s.get("merged"):
        run = (
            "Parts of the runs of " + " and ".join(s["merged"]) + " (`python -m"
            " benchmarks.scale_section`, alone; a later run's part replaces an earlier"
            " one's), not with the rest of this file."
        )
    lines += [
        run
        + f" {s['cores']} cores, **shared with other work and noisy**: "
        + (
            "the load average of each run is above."
            if s.get("merged")
            else f"load average {load0['loadavg'][0]:.2f} before"
            f" ({load0['cpu_percent_1s']:.0f}% busy over 1 s),"
            f" {load1.get('loadavg', [float('nan')])[0]:.2f} after."
        )
        + " A private PostgreSQL"
        f" {pg.get('server_version', '?')} cluster started by the section"
        f" (`pg_stat_statements` preloaded, track_io_timing {pg.get('track_io_timing', '?')};"
        f" fsync {pg.get('fsync', '?')}, synchronous_commit {pg.get('synchronous_commit', '?')},"
        f" full_page_writes {pg.get('full_page_writes', '?')}), the demo shop copied into a"
        " database per part. Seconds per part: "
        + ", ".join(f"{k} {v:.0f}" for k, v in s.get("seconds", {}).items())
        + ".",
        "",
    ]
    lines += _pg(s.get("pg"))
    lines += _idle(s.get("idle"))
    lines += _cross(s.get("cross"))
    lines += _projection(s.get("pg"), s.get("idle"))
    lines += _workers(s.get("workers"))
    return "\n".join(lines)


def _failed(title: str, part: dict[str, Any] | None) -> list[str] | None:
    if part is None:
        return []
    if "failed" in part:
        return [title, "", f"Failed: {part['failed']}.", ""]
    return None


def _ran(part: dict[str, Any]) -> str:
    ran = part.get("ran")
    if not ran:
        return ""
    return f" (Ran {ran['date']}, load average {ran['loadavg']:.2f} at its start.)"


def _kinds(systems: dict[str, Any]) -> list[str]:
    """The kinds of turn every system was measured on (an older run has no `later`)."""
    return [kind for kind in KINDS if all(kind in s.get("kinds", {}) for s in systems.values())]


def _pg(p: dict[str, Any] | None) -> list[str]:
    title = "### Postgres's share of a turn"
    if (early := _failed(title, p)) is not None:
        return early
    assert p is not None
    systems = p["systems"]
    cols = [(name, kind) for kind in _kinds(systems) for name in systems]
    k = {(n, kind): systems[n]["kinds"][kind] for n, kind in cols}
    head = " | ".join(f"{n} {kind}" for n, kind in cols)
    lines = [
        title,
        "",
        "`benchmarks/pg_share.py`: one system at a time on its own copy of the shop, turns"
        f" {p['concurrency']} at a time{_rounds_text(p)}. Read (each on a new thread):"
        ' "where is my order X?"'
        ' (model, get_order_details, model); write (each on a new thread): "please cancel X"'
        " (model, cancel_pending_order, model; our WRITE_CONFIRMATION off, as the peer has no"
        " confirmation); later: the read turn as the fourth of its conversation (three read"
        " turns on each thread before the batch, not measured). **Postgres CPU** is the time"
        " on CPU (/proc/<pid>/schedstat, ns) of every process of the"
        " private cluster (backends, exited ones included, WAL writer, checkpointer,"
        " autovacuum when it runs), from the batch's start to 0.5 s after its end"
        " (non-HOT"
        " updates and inserts: after 11.5 s more, once every backend flushed its counters);"
        " *statement time* is"
        " `pg_stat_statements` total_exec_time. WAL bytes are `pg_current_wal_lsn` differences"
        " (records only: full_page_writes is off). What the system costs while idle (measured"
        " over 12 s before) is subtracted." + _ran(p),
        "",
        f"| per turn | {head} |",
        "|---|" + "---:|" * len(cols),
    ]

    def row(label: str, key: str, digits: int) -> str:
        return f"| {label} | " + " | ".join(fmt(k[c][key], digits) for c in cols) + " |"

    lines += [
        row("**Postgres CPU, ms**", "cpu_ms", 2),
        *(
            [row("of which its own connections' backends, ms", "backend_cpu_ms", 2)]
            if all("backend_cpu_ms" in k[c] for c in cols)
            else []
        ),
        row("statement time (pg_stat_statements), ms", "exec_ms", 2),
        row("statements (BEGIN/COMMIT included)", "statements", 1),
        row("WAL bytes", "wal_bytes", 0),
        "| non-HOT updates (all tables) | "
        + " | ".join(fmt(sum(k[c]["nonhot"].values()), 1) for c in cols)
        + " |",
        "| rows inserted (all tables) | "
        + " | ".join(fmt(sum(k[c]["inserts"].values()), 1) for c in cols)
        + " |",
        "| turns measured (failed) | "
        + " | ".join(f"{k[c]['turns']} ({k[c]['errors']})" for c in cols)
        + " |",
        "",
    ]
    if "ours" in systems and "peer" in systems:
        lines += [
            "Our Postgres CPU per turn against the peer's: "
            + _ours_to_peer(k, systems, "cpu_ms")
            + f" (aim: at most 1x).{_round_ratios(p)}"
            + (
                " Their own connections' backends alone (what the statements, their commits"
                " and their protocol cost, without the cluster's background processes, whose"
                " work, autovacuum above all, lands in whichever batch runs when it does): "
                + _ours_to_peer(k, systems, "backend_cpu_ms")
                + "."
                + _round_ratios(p, " backends")
                if all("backend_cpu_ms" in k[("ours", kind)] for kind in _kinds(systems))
                else ""
            )
            + " Idle cost subtracted: "
            + ", ".join(
                f"{n} {fmt(systems[n]['idle']['cpu_ms_per_s'], 1)} ms CPU and"
                f" {fmt(systems[n]['idle']['statements_per_s'], 1)} statements a second"
                for n in systems
            )
            + ".",
            "",
        ]
    lines += ["Non-HOT updates per turn, by table:", ""]
    for c in cols:
        nonhot = k[c]["nonhot"]
        shown = ", ".join(f"{t} {v:.1f}" for t, v in sorted(nonhot.items(), key=lambda x: -x[1]))
        lines.append(f"- {c[0]} {c[1]}: {shown or 'none'}")
    lines.append("")
    for c in cols:
        lines += [
            f"Top statements by time, {c[0]} {c[1]} turn:",
            "",
            "| ms/turn | calls/turn | statement |",
            "|---:|---:|---|",
        ]
        for r in k[c]["top"][:6]:
            lines.append(
                f"| {r['exec_ms']:.3f} | {r['calls']:.1f} | `{_cell(_short(r['query']))}` |"
            )
        lines.append("")
    return lines


def _rounds_text(p: dict[str, Any]) -> str:
    n = len(p.get("rounds") or [])
    if n < 2:
        return ""
    return (
        f", in {n} rounds: each round runs every kind of turn on both systems, one after the"
        " other, the first system alternating, each round on threads and orders of its own"
    )


def _ours_to_peer(
    k: dict[tuple[str, str], dict[str, Any]], systems: dict[str, Any], key: str
) -> str:
    parts = []
    for kind in _kinds(systems):
        peer, ours = k[("peer", kind)][key], k[("ours", kind)][key]
        parts.append(f"{kind} {ours / peer:.2f}x" if peer > 0 else f"{kind} n/a")
    return ", ".join(parts)


def _round_ratios(p: dict[str, Any], of: str = "") -> str:
    """Each round's ours/peer ratio by kind (`of`: " backends", their own connections'):
    the figures above are sums, these show how far one batch's verdict can move."""
    rounds = p.get("rounds") or []
    if len(rounds) < 2:
        return ""
    parts = []
    for kind in _kinds(p["systems"]):
        each = [
            r[kind][f"ours{of}"] / r[kind][f"peer{of}"]
            for r in rounds
            if kind in r and r[kind].get(f"peer{of}", 0) > 0 and f"ours{of}" in r[kind]
        ]
        if each:
            parts.append(
                f"{kind} " + ", ".join(f"{x:.2f}" for x in each) + f" (median {median(each):.2f})"
            )
    return " Round by round: " + "; ".join(parts) + "."


def _idle(p: dict[str, Any] | None) -> list[str]:
    title = "### Idle replicas"
    if (early := _failed(title, p)) is not None:
        return early
    assert p is not None
    modes = p["modes"]
    lines = [
        title,
        "",
        f"Replicas of the shipped default (`python -m app serve`, {p['workers_per_replica']}"
        " workers each: one per core), no traffic at all; each count counted over"
        f" {p['window_s']:.0f} s after {p.get('settle_s', 10):.0f} s to settle (replicas"
        " added to the ones running). Transactions: `xact_commit + xact_rollback` of the database"
        " (pg_stat_database); statements: `pg_stat_statements` calls; Postgres CPU: the"
        " cluster's processes. *Before*: DATABASE_LISTEN_URL=off, every loop polls at its own"
        " pace (as before LISTEN/NOTIFY); *after*: the shipped default (LISTEN, the polls a"
        f" slow fallback). Aim: at most {TARGET_IDLE_XACTS} transactions a second per replica."
        + _ran(p),
        "",
        "| replicas | before: transactions/s per replica | statements/s (all) | Postgres CPU"
        " ms/s | after: transactions/s per replica | statements/s (all) | Postgres CPU ms/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    before = {r["replicas"]: r for r in modes.get("poll", [])}
    after = {r["replicas"]: r for r in modes.get("listen", [])}
    for n in sorted(set(before) | set(after)):

        def cells(r: dict[str, Any] | None) -> str:
            if r is None:
                return "n/a | n/a | n/a"
            return (
                f"{fmt(r['xacts_per_s_per_replica'], 2)} | {fmt(r['statements_per_s'], 1)}"
                f" | {fmt(r['pg_cpu_ms_per_s'], 1)}"
            )

        lines.append(f"| {n} | {cells(before.get(n))} | {cells(after.get(n))} |")
    for mode, label in (("poll", "before"), ("listen", "after")):
        if not modes.get(mode) or "top" not in modes[mode][-1]:
            continue
        last = modes[mode][-1]
        lines += [
            "",
            f"What {last['replicas']} idle replicas ran, {label} (statements a second, all of"
            " them):",
            "",
            "| per second | statement |",
            "|---:|---|",
        ]
        for per_s, query in last["top"]:
            lines.append(f"| {per_s:.2f} | `{_cell(_short(query))}` |")
    return [*lines, ""]


def _cross(p: dict[str, Any] | None) -> list[str]:
    title = "### Cross-replica latency"
    if (early := _failed(title, p)) is not None:
        return early
    assert p is not None
    modes = p["modes"]
    lines = [
        title,
        "",
        "`benchmarks/cross_replica.py`: two replicas of the shipped default on one database;"
        " posted on A, seen on B, timed by one process from the moment the request to A is"
        " sent. Cancel: B streams a run (20 tokens/s), the cancel goes to A after its first"
        " token, seen when B's stream ends `cancelled`. Staff message: posted on A by the"
        " staff member holding the thread, seen on the customer's `/events` stream on B."
        " Webhook: a transfer of the thread on A, seen when the receiver gets its"
        " `handoff.transferred` (sent by whichever replica's delivery loop claims it)."
        f" {p['tries']} tries each, a random pause of up to 0.4 s before each. *Before*:"
        " DATABASE_LISTEN_URL=off (polls: runs' requests 0.25 s, thread feed 0.3 s,"
        " webhooks 1 s); *after*: LISTEN." + _ran(p),
        "",
        "| posted on A, seen on B | before p50 / p95 ms | after p50 / p95 ms | seen / tries"
        " (before, after) | A's own answer p50 ms (after) |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = {"cancel": "a cancel", "staff_message": "a staff message", "webhook": "a webhook"}
    for key, label in labels.items():
        b = modes.get("poll", {}).get(key)
        a = modes.get("listen", {}).get(key)

        def pair(r: dict[str, Any] | None) -> str:
            return "n/a" if r is None else f"{fmt(r['p50_ms'], 0)} / {fmt(r['p95_ms'], 0)}"

        seen = ", ".join(f"{r['seen']}/{r['tries']}" if r else "n/a" for r in (b, a))
        answer = fmt(a["a_answered_p50_ms"], 0) if a else "n/a"
        lines.append(f"| {label} | {pair(b)} | {pair(a)} | {seen} | {answer} |")
    return [*lines, ""]


def _projection(p: dict[str, Any] | None, idle: dict[str, Any] | None) -> list[str]:
    if not p or "failed" in p or "ours" not in p.get("systems", {}):
        return []
    kinds = p["systems"]["ours"]["kinds"]
    budget = PRIMARY_CORES * CEILING * 1000  # CPU ms a second the turns may use
    idle_ms = 0.0
    idle_n = 0
    if idle and "failed" not in idle and idle["modes"].get("listen"):
        top = max(idle["modes"]["listen"], key=lambda r: r["replicas"])
        idle_ms, idle_n = max(top["pg_cpu_ms_per_s"], 0.0), top["replicas"]
    lines = [
        "### The projection: one 16-core primary",
        "",
        f"The turns may use {CEILING:.0%} of {PRIMARY_CORES} cores: {PRIMARY_CORES} x"
        f" {CEILING:.2f} x 1,000 = **{budget:,.0f} ms of Postgres CPU a second**"
        + (
            f", less what {idle_n} idle replicas cost it ({idle_ms:.1f} ms/s measured above,"
            " after): "
            f"{budget - idle_ms:,.0f} ms/s."
            if idle_n
            else "."
        )
        + f" At one message per {MESSAGE_EVERY_S:.0f} s, each open conversation is 1/"
        f"{MESSAGE_EVERY_S:.0f} turn a second.",
        "",
        "| our turns, all of one kind | Postgres CPU ms/turn (measured above) | turns/s"
        " = budget / CPU per turn | open conversations = turns/s x 20 s |",
        "|---|---:|---:|---:|",
    ]
    for kind in [k for k in KINDS if k in kinds]:
        cpu = kinds[kind]["cpu_ms"]
        if cpu <= 0:
            continue
        tps = (budget - idle_ms) / cpu
        lines.append(
            f"| {kind} | {cpu:.2f} | {budget - idle_ms:,.0f} / {cpu:.2f} = {tps:,.0f}"
            f" | {tps:,.0f} x {MESSAGE_EVERY_S:.0f} = {tps * MESSAGE_EVERY_S:,.0f} |"
        )
    lines += [
        "",
        "The CPU per turn is this machine's cores (see Machine) on a cluster with fsync and"
        " synchronous_commit off, at a few turns at once: a primary with durable commits"
        " spends more per write, and a server core may be faster or slower than these. Only"
        " Postgres's CPU is projected: its I/O, locks and connections (PgBouncer in front)"
        " are assumed to keep up.",
        "",
    ]
    return lines


def _ratios(runs: dict[str, list[dict[str, Any]]]) -> list[float]:
    """2-worker turns/s against 1 worker's, run by run (each pair run one after the other)."""
    return [
        t["turns_per_s"] / o["turns_per_s"] if o["turns_per_s"] else float("nan")
        for t, o in zip(runs["2"], runs["1"], strict=False)
    ]


def _workers(p: dict[str, Any] | None) -> list[str]:
    title = "### Workers that share the load"
    if (early := _failed(title, p)) is not None:
        return early
    assert p is not None
    two, one = p["runs"]["2"], p["runs"]["1"]
    lines = [
        title,
        "",
        f"{p['customers']} customers, an instant model, {p['turns']} turns a run"
        " (`benchmarks.loadgen`, keep-alive connections), `serve --workers 2` (one"
        " SO_REUSEPORT listener per worker, app/serving.py) and `--workers 1` running side by"
        " side, runs alternating. Each worker's share of the service's CPU: its own /proc CPU"
        " over the run against all workers'." + _ran(p),
        "",
        "| run | 2 workers: turns/s | CPU s per worker | top worker's share | machine busy"
        " | 1 worker: turns/s | 2 / 1 |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    ratios = _ratios(p["runs"])
    for i, (t, o, ratio) in enumerate(zip(two, one, ratios, strict=False)):
        lines.append(
            f"| {i + 1} | {fmt(t['turns_per_s'])} | "
            + " + ".join(fmt(x, 2) for x in t["worker_cpu_s"])
            + f" | {t['top_share']:.0%} | {t['machine_busy']:.0%} | {fmt(o['turns_per_s'])}"
            f" | {ratio:.2f}x |"
        )
    tops = [t["top_share"] for t in two]
    if tops and ratios:
        lines += [
            "",
            f"Top worker's share: at most **{max(tops):.0%}** over {len(tops)} runs (aim: no"
            f" worker above {TARGET_TOP_SHARE:.0%}); 2 workers against 1: median"
            f" **{median(ratios):.2f}x** (aim: at least {TARGET_SPEEDUP}x on 2 cores; the"
            " load generator, the model server and Postgres share the same two cores).",
        ]
    return [*lines, *_where_cpu_went(two, one, int(p.get("cores") or 2)), ""]


def _where_cpu_went(two: list[dict[str, Any]], one: list[dict[str, Any]], cores: int) -> list[str]:
    """The median CPU a turn cost each process, and the ceilings it sets on this machine:
    two workers go no faster than the machine's cores allow with every process's share;
    one worker no faster than one core over the service's share."""
    twos = [r["cpu_ms_per_turn"] for r in two if "cpu_ms_per_turn" in r]
    ones = [r["cpu_ms_per_turn"] for r in one if "cpu_ms_per_turn" in r]
    if not twos or not ones:
        return []
    names = ("service", "postgres", "model", "load generator", "other", "machine")

    def cells(runs: list[dict[str, float]]) -> str:
        return " | ".join(fmt(median([r[n] for r in runs]), 1) for n in names)

    # the turns/s the 2-worker runs would reach with the machine 100% busy
    full = median([r["turns_per_s"] / r["machine_busy"] for r in two if r["machine_busy"]])
    service_1 = median([r["service"] for r in ones])
    return [
        "",
        "CPU per turn by process, ms (medians of the runs, over the load generator's whole"
        " run, its start and end included; `other`: the idle service of the other run, the"
        " kernel, the rest):",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        f"| 2 workers | {cells(twos)} |",
        f"| 1 worker | {cells(ones)} |",
        "",
        f"The ceilings these set on {cores} cores: 2 workers at most about {full:.0f} turns/s"
        " (each run's turns/s over how busy the machine was); 1 worker at most 1,000 /"
        f" {service_1:.1f} = {1000 / service_1:.0f} turns/s (one core over the service's"
        f" share): a ratio of at most about {full * service_1 / 1000:.2f}x while the load"
        " generator, the model and Postgres take their share of the same cores.",
    ]


def targets(s: dict[str, Any]) -> list[str]:
    """Rows of RESULTS.md's Targets table (| target | measured | met |)."""
    rows = []
    pg = s.get("pg") or {}
    systems = pg.get("systems", {})
    if "ours" in systems and "peer" in systems:
        cells, met = [], True
        for kind in _kinds(systems):
            ours = systems["ours"]["kinds"][kind]["cpu_ms"]
            peer = systems["peer"]["kinds"][kind]["cpu_ms"]
            cells.append(f"{kind} {ours:.2f} vs {peer:.2f} ms")
            met = met and ours <= peer
        rows.append(
            "| Postgres CPU per turn no higher than the peer's (section scale) | "
            + ", ".join(cells)
            + f" | {'yes' if met else 'no'} |"
        )
    after = ((s.get("idle") or {}).get("modes") or {}).get("listen")
    if after:
        worst = max(r["xacts_per_s_per_replica"] for r in after)
        rows.append(
            f"| idle replica: at most {TARGET_IDLE_XACTS} transactions/s (1 to"
            f" {max(r['replicas'] for r in after)} replicas) | at most {worst:.2f}"
            f" | {'yes' if worst <= TARGET_IDLE_XACTS else 'no'} |"
        )
    runs = (s.get("workers") or {}).get("runs")
    if runs and runs["2"] and runs["1"]:
        top = max(t["top_share"] for t in runs["2"])
        ratio = median(_ratios(runs))
        rows.append(
            f"| workers share the load: none above {TARGET_TOP_SHARE:.0%} of the CPU; 2 workers"
            f" >= {TARGET_SPEEDUP}x 1 worker's turns/s | top {top:.0%}; {ratio:.2f}x"
            f" | {'yes' if top <= TARGET_TOP_SHARE and ratio >= TARGET_SPEEDUP else 'no'} |"
        )
    return rows
