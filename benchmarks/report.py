"""Render a run's results.json as benchmarks/RESULTS.md.

python -m benchmarks.report benchmarks/out/<stamp>/results.json [RESULTS.md]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.stats import fmt, fmt_pair, median, p95

FINDINGS = Path(__file__).parent / "FINDINGS.md"
NA = "n/a"


def _pool(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [v for r in runs for v in r.get(key, [])]


def _load_cells(runs: list[dict[str, Any]]) -> dict[str, Any]:
    latency = _pool(runs, "latency_ms")
    ttft = _pool(runs, "ttft_ms")
    cpu = [r["server_cpu_ms_per_turn"] for r in runs if "server_cpu_ms_per_turn" in r]
    machine = [r["machine_cpu_ms_per_turn"] for r in runs if "machine_cpu_ms_per_turn" in r]
    other = [r["cpu"].get("other", 0) / max(r["cpu"].get("elapsed", 1), 1e-9) for r in runs]
    return {
        "tps": [r["turns_per_s"] for r in runs],
        "tps_med": median([r["turns_per_s"] for r in runs]) if runs else float("nan"),
        "lat50": median(latency),
        "lat95": p95(latency),
        "ttft50": median(ttft),
        "ttft95": p95(ttft),
        "errors": sum(r["errors"] for r in runs),
        "turns": sum(r["turns"] for r in runs),
        "cpu": cpu,
        "machine": machine,
        "other": other,
        "runs": len(runs),
    }


def _paired_shares(ours: list[dict[str, Any]], other: list[dict[str, Any]]) -> list[float]:
    """Ours over the other system, rep by rep: the section rotates the systems, so a rep's
    runs are minutes apart at most, while the machine's speed drifts more than that between
    the first rep and the last (seen: the thin service at 52 and 91 turns/s in one run).
    Shown beside the ratio of medians, which still decides the target."""
    return [
        a["turns_per_s"] / b["turns_per_s"]
        for a, b in zip(ours, other, strict=False)
        if b["turns_per_s"]
    ]


def _load_table(table: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    lines = [
        "| customers | system | runs | turns/s | turn p50 ms | turn p95 ms | TTFT p50 ms "
        "| TTFT p95 ms | errors / turns | server CPU ms/turn | machine CPU ms/turn "
        "| other load (cores) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for customers, systems in table.items():
        for name, runs in systems.items():
            c = _load_cells(runs)
            cells = [
                customers,
                name,
                c["runs"],
                fmt_pair(c["tps"]),
                fmt(c["lat50"], 0),
                fmt(c["lat95"], 0),
                fmt(c["ttft50"], 0),
                fmt(c["ttft95"], 0),
                f"{c['errors']} / {c['turns']}",
                fmt_pair(c["cpu"]),
                fmt_pair(c["machine"]) if c["machine"] else "-",
                fmt_pair(c["other"], 2),
            ]
            lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    return lines


def _ratio_lines(table: dict[str, dict[str, list[dict[str, Any]]]], a: str, b: str) -> list[str]:
    lines = []
    for customers, systems in table.items():
        if a in systems and b in systems and systems[a] and systems[b]:
            ca, cb = _load_cells(systems[a]), _load_cells(systems[b])
            if cb["tps_med"]:
                lines.append(
                    f"- {customers} customers: {a} {ca['tps_med'] / cb['tps_med']:.2f}x the turns/s"
                    f" of {b}; p95 turn latency {fmt(ca['lat95'], 0)} vs {fmt(cb['lat95'], 0)} ms."
                )
    return lines


def _section_machine(r: dict[str, Any]) -> list[str]:
    m = r["machine"]
    pkgs = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    pg = m["postgres_settings"]
    load = m.get("load_before", {})
    loadavg = ", ".join(f"{x:.2f}" for x in load.get("loadavg", []))
    return [
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| date | {m['date']} |",
        f"| CPU | {m['cores']} cores, {m['cpu_model']} |",
        f"| memory | {m['memory_gib']} GiB |",
        f"| Python | {m['python']} ({m['platform']}) |",
        f"| Postgres | {m['postgres']} (the machine's server; fsync={pg.get('fsync')}, "
        f"synchronous_commit={pg.get('synchronous_commit')}, "
        f"shared_buffers={pg.get('shared_buffers')} x 8 kB, "
        f"max_connections={pg.get('max_connections')}) |",
        f"| packages | {pkgs} |",
        f"| load before the run | load average {loadavg}; CPU busy "
        f"{load.get('cpu_percent_1s', 0):.0f}% |",
        f"| run | plan `{r['plan']}`, {r['duration_s'] / 60:.1f} minutes |",
        "",
        "Every process of the benchmark (Postgres, the model server, both services, the load",
        "generator) shares these cores, and so does whatever else the machine runs: the"
        " *other load* column",
        "gives the CPU used meanwhile by processes that are not part of the benchmark (and not"
        " Postgres),",
        "in cores. Runs with a high other load are slower for reasons outside the code.",
        "",
    ]


# The performance budget (DEVELOPERS.md), as ratios against the tutorial peer in one run.
PEER_TPS_RATIO = 3.0  # turns/s at 32 customers, shipped defaults, p95 better
PEER_CPU_RATIO = 0.4  # service CPU per turn, one process each
THIN_SHARE = 0.9  # of the thinnest durable service (ceiling (c): thin-postgres)


def _targets(r: dict[str, Any]) -> list[str]:
    rows = []
    inst = r.get("load", {}).get("instant", {}).get("32", {})
    peer = _load_cells(inst["peer"]) if inst.get("peer") else None
    for name in [n for n in inst if n.startswith("ours")]:
        ours = _load_cells(inst[name])
        if peer and peer["tps_med"]:
            ratio = ours["tps_med"] / peer["tps_med"]
            met = ratio >= PEER_TPS_RATIO and ours["lat95"] <= peer["lat95"]
            rows.append(
                f"| instant model, 32 customers: >= {PEER_TPS_RATIO:g}x the peer's turns/s,"
                f" better p95 ({name}) | {ratio:.2f}x ({ours['tps_med']:.1f} vs"
                f" {peer['tps_med']:.1f} turns/s); p95 {fmt(ours['lat95'], 0)} vs"
                f" {fmt(peer['lat95'], 0)} ms | {'yes' if met else 'no'} |"
            )
        if name == "ours" and peer and ours["cpu"] and peer["cpu"]:
            mine, theirs = median(ours["cpu"]), median(peer["cpu"])
            share = mine / theirs
            rows.append(
                f"| service CPU per turn <= {PEER_CPU_RATIO:g}x the peer's, one process each"
                f" (instant model, 32 customers) | {share:.2f}x ({mine:.1f} vs {theirs:.1f}"
                f" ms) | {'yes' if share <= PEER_CPU_RATIO else 'no'} |"
            )
    thin = r.get("thin", {}).get("32", {})
    if thin.get("ours") and thin.get("thin-postgres"):
        ours, durable = _load_cells(thin["ours"]), _load_cells(thin["thin-postgres"])
        share = ours["tps_med"] / durable["tps_med"]
        pairs = _paired_shares(thin["ours"], thin["thin-postgres"])
        paired = (
            f"; rep by rep, adjacent runs: median {100 * median(pairs):.0f}%,"
            f" {100 * min(pairs):.0f}-{100 * max(pairs):.0f}%"
            if pairs
            else ""
        )
        rows.append(
            f"| >= {100 * THIN_SHARE:.0f}% of the thinnest durable service (ceiling (c),"
            f" thin-postgres), one process each, 32 customers | {100 * share:.0f}%"
            f" ({ours['tps_med']:.1f} of {durable['tps_med']:.1f} turns/s{paired})"
            f" | {'yes' if share >= THIN_SHARE else 'no'} |"
        )
    over = r.get("overhead")
    if over:
        added = median([o["added_ms"] for o in over])
        rows.append(
            f"| service overhead per turn < 10 ms p50 | {added:.1f} ms "
            f"(ratio {median([o['ratio'] for o in over]):.2f}) | {'yes' if added < 10 else 'no'} |"
        )
    long = r.get("long", {}).get("levels", {})
    keys = sorted(long, key=int)
    if len(keys) >= 2 and long[keys[0]]["latency_ms"] and long[keys[-1]]["latency_ms"]:
        first, last = median(long[keys[0]]["latency_ms"]), median(long[keys[-1]]["latency_ms"])
        ratio = last / first
        rows.append(
            f"| flat cost: turn latency at {keys[-1]} messages within 1.3x of {keys[0]} messages "
            f"| {ratio:.2f}x ({last:.0f} vs {first:.0f} ms p50) "
            f"| {'yes' if ratio <= 1.3 else 'no'} |"
        )
    rows += _capacity_targets(r)
    if not rows:
        return []
    return [
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        *rows,
        "",
    ]


def _capacity_targets(r: dict[str, Any]) -> list[str]:
    rows = []
    c = r.get("capacity")
    if c and "ours" in c["systems"]:
        ours = c["systems"]["ours"]
        peer = c["systems"].get("peer")

        def held(s: dict[str, Any]) -> str:
            if not s["held"]:
                return f"< {min(int(k) for k in s['levels']):,}"
            return (">= " if s.get("top_tried_holds") else "") + f"{s['held']:,}"

        rows.append(
            "| realistic capacity: open conversations held with p95 within"
            f" {c['hold_ratio']}x of one customer's, shipped defaults (aim 1,000)"
            f" | ours {held(ours)}"
            + (f", peer {held(peer)}" if peer else "")
            + f" | {'yes' if ours['held'] >= 1000 else 'no'} |"
        )
    rt = r.get("roundtrips", {}).get("kinds")
    if rt:
        rows.append(
            "| round trips per turn (counted; state before and after)"
            f" | read {rt['read']['round_trips_per_turn']:.1f}"
            f" ({rt['read']['statements_per_turn']:.0f} statements),"
            f" write {rt['write']['round_trips_per_turn']:.1f}"
            f" ({rt['write']['statements_per_turn']:.0f} statements) | - |"
        )
    if r.get("scale"):
        from benchmarks.scale_report import targets as scale_targets

        rows += scale_targets(r["scale"])
    lg = r.get("lg_cost")
    if lg:
        rows.append(
            "| a read turn through /lg runs.stream vs the native POST (service CPU, p50)"
            f" | {lg['lg']['cpu_ms_per_turn']:.1f} vs {lg['native']['cpu_ms_per_turn']:.1f} ms"
            f" CPU, {lg['lg']['latency_ms_p50']:.0f} vs {lg['native']['latency_ms_p50']:.0f} ms"
            " | - |"
        )
    return rows


def _section_overhead(r: dict[str, Any]) -> list[str]:
    runs = r.get("overhead")
    if not runs:
        return []
    n = runs[0]["http"]["n"]

    def col(kind: str, key: str) -> str:
        return fmt_pair([o[kind][key] for o in runs])

    return [
        "## 1. Our own cost per turn",
        "",
        "One order-lookup turn (model -> get_order_details -> model answer), instant model, one",
        f"customer at a time. {len(runs)} runs of {n} turns; each turn is sent over HTTP + SSE to"
        " the",
        "service and then run on the same compiled graph in-process, on threads with identical"
        " history,",
        "from one client process (`benchmarks/overhead.py`), so all three paths see the same"
        " machine load.",
        "",
        "| path | turn p50 ms | turn p95 ms |",
        "|---|---:|---:|",
        f"| HTTP + SSE through the service | {col('http', 'p50')} | {col('http', 'p95')} |",
        "| in-process `graph.ainvoke` (the service's PostgresCheckpointer on a pool,"
        f" durability=sync) "
        f"| {col('invoke', 'p50')} | {col('invoke', 'p95')} |",
        f"| in-process `graph.astream` (the service's stream modes) "
        f"| {col('astream', 'p50')} | {col('astream', 'p95')} |",
        "",
        f"- **Added by the service (p50 HTTP - p50 ainvoke): "
        f"{fmt_pair([o['added_ms'] for o in runs])} ms**; ratio "
        f"{fmt_pair([o['ratio'] for o in runs], 2)}.",
        f"- Median of the per-turn paired differences: "
        f"{fmt_pair([o['paired_diff_p50'] for o in runs])} ms; against `astream` instead of"
        f" `ainvoke`: {fmt_pair([o['added_vs_astream_ms'] for o in runs])} ms.",
        "",
        "Cells are median / p95 over the runs of each run's figure.",
        "",
    ]


def _section_load(r: dict[str, Any]) -> list[str]:
    load = r.get("load", {})
    if not load:
        return []
    profiles = r.get("profiles", {})
    lines = [
        "## 2. Throughput and latency under load",
        "",
        "Simulated customers each hold their own thread and conversations of 3 order-lookup turns",
        "(model -> tool -> model), back to back, until the run's turns are done (at least 6 per",
        "customer, and 400 per run). The load generator is a separate process"
        " (`benchmarks/loadgen.py`: asyncio streams on uvloop, HTTP/1.1 keep-alive and its own SSE"
        " parser, to take little CPU from the services on the same cores)",
        "that reads every stream to its end; ours and the peer run alternately (A/B, then B/A).",
        "TTFT is the time to the first answer token. *turns/s* and *server CPU* are median /"
        " p95 over",
        "runs; latency and TTFT percentiles pool every turn of every run. *server CPU ms/turn* is"
        " the",
        "service process's CPU time divided by completed turns.",
        "",
    ]
    for profile, table in load.items():
        label = profiles.get(profile, {}).get("label", profile)
        lines += [
            f"### {label}",
            "",
            *_load_table(table),
            "",
            *[
                line
                for name in sorted(n for n in {k for v in table.values() for k in v} if n != "peer")
                for line in _ratio_lines(table, name, "peer")
            ],
            "",
        ]
    return lines


def _section_variant(r: dict[str, Any]) -> list[str]:
    table = r.get("variant")
    if not table:
        return []
    names = sorted({name for systems in table.values() for name in systems} - {"ours"})
    ratios = [line for name in names for line in _ratio_lines(table, name, "ours")]
    return [
        "### Proposed changes, measured",
        "",
        "Our service started through `benchmarks/variant.py`, which applies one change by"
        " monkeypatch",
        "(nothing under app/ is edited), alternating with the unchanged service. Instant model.",
        "",
        "- `lockless`: `AsyncPostgresSaver._cursor` skips the saver's process-wide"
        " `asyncio.Lock` when",
        "  it holds a connection pool (each operation then has its own pooled connection).",
        '- `async`: the run streams the graph with `durability="async"` instead of `"sync"`',
        "  (a step's checkpoint is written while the next step runs; the run still ends after"
        " every",
        "  write has landed).",
        "",
        *_load_table(table),
        "",
        *ratios,
        "",
    ]


def _section_long(r: dict[str, Any]) -> list[str]:
    long = r.get("long")
    if not long:
        return []
    lines = [
        "## 3. Long threads",
        "",
        "Threads are built to 4, 40 and 400 messages by posting order-lookup turns (4 messages"
        " each;",
        f"build took {long['build_s']:.0f} s, {long['build_errors']} errors), then one more turn"
        " is measured on",
        "each thread, one at a time, the levels taking turns (4, 40, 400, 4, ...) so that a"
        " change in",
        "machine speed during the run touches every level alike. The levels are paired: each"
        " customer has one thread at every level, built from the same questions about the"
        " same order, and the measured turn asks each about another order of theirs, one no"
        " earlier turn looked up, so no level is served from the tool cache."
        " Instant model. *Checkpoint bytes* is the sum of `octet_length`",
        "over the rows the turn added to `checkpoints` (checkpoint + metadata as text),"
        " `checkpoint_blobs`",
        "and `checkpoint_writes` (blob), per turn. *Input tokens* is the `done` event's",
        "`usage.input_tokens`: both model calls of the turn added up (the trim budget",
        "CONTEXT_MAX_TOKENS=6000 applies to each call's messages; the tool schemas come on top).",
        "",
        "| history (messages posted) | messages in the transcript | turns | turn p50 / p95 ms "
        "| TTFT p50 ms | checkpoint bytes/turn (median / p95) | rows/turn ckpt+blobs+writes "
        "| input tokens/turn (max) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level, e in sorted(long["levels"].items(), key=lambda kv: int(kv[0])):
        rows = e["rows_per_turn"]
        tokens = e["input_tokens"]
        working = f"{min(e['history'])}-{max(e['history'])}" if e["history"] else NA
        lines.append(
            f"| {level} | {working} | {len(e['latency_ms'])} | {fmt(median(e['latency_ms']), 0)} / "
            f"{fmt(p95(e['latency_ms']), 0)} | {fmt(median(e['ttft_ms']), 0)} | "
            f"{fmt_pair(e['bytes_per_turn'], 0)} | {rows['checkpoints']:.1f} + "
            f"{rows['blobs']:.1f} + {rows['writes']:.1f} | "
            f"{fmt(median(tokens), 0) if tokens else NA} ({max(tokens) if tokens else NA}) |"
        )
    by_table = [
        f"{level} messages: "
        + ", ".join(f"{t} {v / 1024:.1f} KiB" for t, v in e["bytes_by_table"].items())
        for level, e in sorted(long["levels"].items(), key=lambda kv: int(kv[0]))
    ]
    lines += [
        "",
        "Checkpoint bytes per turn by table: " + "; ".join(by_table) + ".",
        "",
        "*Messages in the transcript* is the thread's `message_count` before the measured turn:",
        "every message of the conversation, which summaries never lower. The working list in the",
        "checkpoint is shorter: once it passes SUMMARY_TRIGGER_TOKENS the service folds the",
        "oldest messages into a summary and moves them to the transcript archive, so a thread of",
        "400 posted messages keeps only its newest ones (about SUMMARY_KEEP_TOKENS) in the",
        "checkpoint.",
        "",
    ]
    pg_levels = {k: v["pg"] for k, v in long["levels"].items() if "pg" in v}
    if pg_levels:
        lines += [
            "SQL per turn, counted with `pg_stat_database` and `pg_stat_user_tables` deltas over"
            " the",
            "turns of a second pass, one more turn per thread, level by level (pg_stat_statements"
            " is not loaded here). Each read waits 11.5 s so",
            "every backend has published its counters; the benchmark's own statements are"
            " subtracted.",
            "`xact_commit` counts transactions: with autocommit each statement outside an explicit",
            "transaction or pipeline is one, so it is a lower bound on statements.",
            "",
            "| history | xact_commit/turn | tuples inserted/turn | tuples updated/turn | "
            "inserted into checkpoints / blobs / writes / runs / threads |",
            "|---:|---:|---:|---:|---|",
        ]
        for level, pg in sorted(pg_levels.items(), key=lambda kv: int(kv[0])):
            t = pg["tables_per_turn"]

            def ins(name: str, t: dict[str, Any] = t) -> str:
                return f"{t.get(name, {}).get('n_tup_ins', 0):.1f}"

            lines.append(
                f"| {level} | {pg['xact_commit_per_turn']:.1f} | "
                f"{pg['tup_inserted_per_turn']:.1f} | {pg['tup_updated_per_turn']:.1f} | "
                f"{ins('checkpoints')} / {ins('checkpoint_blobs')} / {ins('checkpoint_writes')}"
                f" / {ins('runs')} / {ins('threads')} |"
            )
        lines.append("")
    return lines


def _section_memory(r: dict[str, Any]) -> list[str]:
    mem = r.get("memory")
    if not mem:
        return []
    label = r.get("profiles", {}).get("slow", {}).get("label", "slow")
    lines = [
        "## 4. Memory with open SSE streams",
        "",
        f"All streams are started at once against the {label} model, so each stays open for"
        " several",
        "seconds. RSS is sampled every 50 ms; *RSS with N open* is the highest sample while the"
        " most",
        "streams were open at the same moment (from the client's open and close times).",
        "",
        "| system | streams | most open at once | idle RSS MiB | RSS with them open MiB | "
        "per open stream KiB | peak RSS MiB | after MiB | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in mem.items():
        lines.append(
            f"| {name} | {m['streams']} | {m['max_open_at_once']} | {m['idle_mb']:.0f} | "
            f"{m['rss_at_max_open_mb']:.0f} | {m['per_stream_kb']:.0f} | {m['peak_mb']:.0f} | "
            f"{m['after_mb']:.0f} | {m['errors']} |"
        )
    return [*lines, ""]


def _paired_tps(ceiling: dict[str, Any] | None, name: str) -> float | None:
    """Median turns/s of `name`'s runs that alternated with the ceiling's, if there were."""
    paired = (ceiling or {}).get("paired") or {}
    runs = paired.get("runs") if paired.get("name") == name else None
    return median([x["turns_per_s"] for x in runs]) if runs else None


def _section_ceilings(r: dict[str, Any]) -> list[str]:
    lines = ["## 5. Ceilings", ""]
    inst = r.get("load", {}).get("instant", {})
    ours32 = _load_cells(inst["32"]["ours"]) if inst.get("32", {}).get("ours") else None
    for key, name in (("ceiling_a", "ours"), ("ceiling_a_procs", None)):
        a = r.get(key)
        if not a or not a["runs"]:
            continue
        c = _load_cells(a["runs"])
        n = a.get("processes", 1)
        name = name or f"ours-{n}w"
        service = _load_cells(inst["32"][name]) if inst.get("32", {}).get(name) else None
        lines += [
            f"**(a) LangGraph itself, {n} process(es).** The same compiled graph (`build_graph`,"
            " same tools, ChatOpenAI, the same",
            f"model server) run in-process with `InMemorySaver`, {a['customers']} concurrent"
            f" customers split over {n} process(es), `astream`",
            "with the service's stream modes, on the service's event loop (uvloop) and"
            " garbage-collector settings, on the same machine: "
            f"**{fmt_pair(c['tps'])} turns/s** (turn p50 {fmt(c['lat50'], 0)} ms,"
            f" p95 {fmt(c['lat95'], 0)} ms; process CPU {fmt_pair(c['cpu'])} ms/turn).",
        ]
        beside = _paired_tps(a, name)
        if beside and c["tps_med"]:
            lines.append(
                f"{name} at {a['customers']} customers, in runs alternating with these:"
                f" {beside:.1f} turns/s = **{100 * beside / c['tps_med']:.0f}% of this ceiling**"
                + (f" (the main table's median: {service['tps_med']:.1f})." if service else ".")
            )
        elif service and c["tps_med"]:
            lines.append(
                f"{name} at 32 customers: {service['tps_med']:.1f} turns/s ="
                f" **{100 * service['tps_med'] / c['tps_med']:.0f}% of this ceiling**."
            )
        if a.get("durable") and c["tps_med"]:
            d = _load_cells(a["durable"])
            lines.append(
                "The same graph in-process with the service's Postgres checkpointer and held"
                " rows instead (durable, no HTTP; each rep right after the ceiling's):"
                f" {fmt_pair(d['tps'])} turns/s, process CPU {fmt_pair(d['cpu'])} ms/turn ="
                f" **{100 * d['tps_med'] / c['tps_med']:.0f}% of this ceiling**."
            )
        lines.append("")
    b = r.get("ceiling_b")
    if b:
        if "tps" not in b:
            lines += [f"**(b) Postgres.** skipped: {b.get('skipped')}", ""]
        else:
            lines += [
                f"**(b) Postgres.** `{b['command']}` with insert.sql = `{b['sql'].strip()}`:",
                f"**{b['tps']:,.0f} commits/s**.",
            ]
            pg4 = r.get("long", {}).get("levels", {}).get("4", {}).get("pg")
            if pg4:
                per_turn = pg4["xact_commit_per_turn"]
                cap = b["tps"] / per_turn if per_turn else 0
                lines.append(
                    f"Divided by our {per_turn:.1f} transactions per turn (item 3, 4 messages):"
                    f" a ceiling of **{cap:,.0f} turns/s** if Postgres commits were the only"
                    " limit."
                )
                if ours32 and cap:
                    lines.append(
                        f"Ours at 32 customers reaches {100 * ours32['tps_med'] / cap:.0f}% of it."
                    )
            lines.append("")
    lines += _ceiling_c(r)
    return lines if len(lines) > 2 else []


def _ceiling_c(r: dict[str, Any]) -> list[str]:
    """The thin services (benchmarks/thin.py) beside ours, as shares of ceiling (a)."""
    table = r.get("thin")
    if not table:
        return []
    a = r.get("ceiling_a")
    ceiling = _load_cells(a["runs"])["tps_med"] if a and a["runs"] else None
    lines = [
        "**(c) The thinnest HTTP + SSE service around the same graph** (`benchmarks/thin.py`:"
        " FastAPI and sse-starlette, the token verified, and nothing else: no ownership check,"
        " run record, thread lock, queue, error mapping or replay), with InMemorySaver"
        " (`thin-memory`) and with the service's Postgres checkpointer and held rows"
        " (`thin-postgres`), one process each, rotating with ours. Instant model:",
        "",
        *_load_table(table),
        "",
    ]
    for customers, systems in table.items():
        for name, runs in systems.items():
            c = _load_cells(runs)
            if ceiling and c["tps_med"]:
                lines.append(
                    f"- {name}, {customers} customers: {c['tps_med']:.1f} turns/s ="
                    f" {100 * c['tps_med'] / ceiling:.0f}% of ceiling (a), 1 process"
                    f" ({ceiling:.1f})."
                )
    return [*lines, ""]


def _probe(level: dict[str, Any], key: str, stat: str, digits: int = 0) -> str:
    value = level.get("probes", {}).get(key, {}).get(stat)
    return NA if value is None else fmt(value, digits)


def _overload(c: dict[str, Any]) -> list[str]:
    """Levels where posts were refused (app/runs/admission.py): what the admitted turns got."""
    rows = [
        (name, n, e)
        for name, s in c["systems"].items()
        for n, e in s["levels"].items()
        if e.get("refused")
    ]
    if not rows:
        return []
    lines = [
        "",
        "Overload: levels where posts were refused with `503 overloaded` (a refused customer"
        " thinks and sends the next message; no retry). *Best below* is the highest turns/s"
        " of a lower level of the same system; errors and wrong answers (a turn that"
        " completed with the model's apology for a failed lookup) are among admitted turns.",
        "",
        "| system | open | turns/s (admitted, completed) | of best below | refused / posts"
        " | refusal p50 / p95 / max ms | admitted errors | wrong answers | admitted p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, n, e in rows:
        below = [
            x["turns_per_s"] for m, x in c["systems"][name]["levels"].items() if int(m) < int(n)
        ]
        best = max(below) if below else float("nan")
        ms = e["refused_ms"]
        lines.append(
            f"| {name} | {int(n):,} | {e['turns_per_s']:.1f} | {e['turns_per_s'] / best:.0%}"
            f" | {e['refused']} / {e['turns']} | {fmt(ms['p50'], 1)} / {fmt(ms['p95'], 1)} /"
            f" {fmt(ms['max'], 1)} | {e['admitted_errors']} | {e['wrong_answers']}"
            f" | {fmt(e['p95_ms'], 0)} |"
        )
    return lines


def section_capacity(r: dict[str, Any]) -> list[str]:
    """Realistic capacity (benchmarks/capacity.py): open conversations held, ours and peer."""
    c = r.get("capacity")
    if not c:
        return []
    lines = [
        "## Realistic capacity: open conversations held",
        "",
        f"Open loop (`benchmarks/capacity.py`): new conversations arrive at a fixed rate, each a"
        f" customer sending {c['turns_per_conversation']} order-lookup messages, the first on a"
        f" new thread, with a think time of {c['think_s']:.0f} +- {c['think_spread_s']:.0f} s"
        " (uniform, seeded) between an answer's end and the next message; the rate is set so"
        " that the level's number of conversations is open at once (and that many are under"
        " way from the start). Model: "
        f"{c['profile']}. Each service runs with the shipped defaults (ours: one worker per"
        " core, its pool, rate limits and the token budget on) on a database of its own with"
        f" {c['customers']} customers, so no customer has two conversations at once. A level"
        f" is warmed up {c['warmup_s']:.0f} s and measured {c['measure_s']:.0f} s (turns"
        " started in that window, each waited for to its end); it **holds** when its p95"
        f" turn time is within {c['hold_ratio']}x of one customer's alone (measured first,"
        " turns one after another) and under 1% of turns fail. Levels go up from the first"
        " while they hold, or down until one does.",
        "",
        "| system | baseline p95 ms (1 customer) | service CPU ms/turn alone"
        " | open conversations held |",
        "|---|---:|---:|---:|",
    ]
    for name, s in c["systems"].items():
        held = f"{s['held']:,}" if s["held"] else f"< {min(int(k) for k in s['levels']):,}"
        held += " (the highest level tried)" if s.get("top_tried_holds") else ""
        base = s["baseline"]
        alone = fmt(base.get("service_cpu_ms_per_turn", float("nan")), 1)
        if "service_idle_cores" in base:
            alone += (
                f" ({fmt(base['service_cpu_ms_per_turn_net'], 1)} less idle work:"
                f" {base['service_idle_cores']:.3f} cores)"
            )
        lines.append(f"| {name} | {fmt(s['baseline']['p95_ms'], 0)} | {alone} | **{held}** |")
    lines += [
        "",
        "| system | open (target / measured) | turns in flight | turns/s | turn p50 / p95 ms"
        " | p95 / baseline | TTFT p50 / p95 ms | errors / turns | service CPU ms/turn"
        " | holds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in c["systems"].items():
        for n, e in s["levels"].items():
            lines.append(
                f"| {name} | {int(n):,} / {e['open_mean']:,.0f} | {e['in_flight_mean']:.1f}"
                f" | {e['turns_per_s']:.1f} | {fmt(e['p50_ms'], 0)} / {fmt(e['p95_ms'], 0)}"
                f" | {e['p95_ratio']:.2f}x | {fmt(e['ttft_p50_ms'], 0)} /"
                f" {fmt(e['ttft_p95_ms'], 0)} | {e['errors']} / {e['turns']}"
                f" | {fmt(e.get('service_cpu_ms_per_turn', float('nan')), 1)}"
                f" | {'yes' if e['holds'] else 'no'} |"
            )
    lines += _overload(c)
    lines += [
        "",
        "What could queue, sampled once a second during each level's measured window"
        " (mean / max): the service's event-loop lag as the time to answer `/healthz`"
        " (`/health` for the peer; answered on the loop with no I/O), the model server's as"
        " the time to answer `/v1/models`, our pool (`/metrics`: connections in use of"
        " DB_POOL_MAX, requests waiting for one), Postgres backends of the database that are"
        " active or waiting on a lock, and cores used by each process (the generator's from"
        " its own CPU time; its loop lag is the lateness of a 50 ms timer, p99 / max)."
        " *Service run-queue wait* is the time its threads were ready to run but waited for"
        " a core (/proc schedstat, in cores): high when the machine is short of CPU, near"
        " zero when the service is waiting on something else. *Machine* is every process's"
        " CPU (2 cores in all), other engineers' work included.",
        "",
        "| system | open | service lag ms | model lag ms | pool in use | pool waiting"
        " | pg active | pg lock waits | service cores | service run-queue wait | model cores"
        " | Postgres cores | machine cores | generator cores (procs) | generator lag ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in c["systems"].items():
        for n, e in s["levels"].items():

            def both(key: str, digits: int = 0, e: dict[str, Any] = e) -> str:
                return f"{_probe(e, key, 'mean', digits)} / {_probe(e, key, 'max', digits)}"

            pool = "-" if name == "peer" else both("pool_in_use", 1)
            waiting = "-" if name == "peer" else both("pool_waiting", 1)
            lag = e["generator_lag_ms"]
            lines.append(
                f"| {name} | {int(n):,} | {both('health_ms', 1)} | {both('model_ms', 1)}"
                f" | {pool} | {waiting} | {both('pg_active', 1)} | {both('pg_lock_waits')}"
                f" | {both(f'cores_{name}', 2)} | {both(f'runq_{name}', 2)}"
                f" | {both('cores_model', 2)} | {both('cores_postgres', 2)}"
                f" | {both('cores_machine', 2)} | {e['generator_cores']:.2f}"
                f" ({e['generator_procs']}) | {fmt(lag['p99'], 1)} / {fmt(lag['max'], 1)} |"
            )
    lines.append("")
    return lines


def section_lg_cost(r: dict[str, Any]) -> list[str]:
    lg = r.get("lg_cost")
    if not lg:
        return []
    from benchmarks.lg_cost import render as render_lg_cost

    return [
        "## A turn through the LangGraph API (/lg) against the native route",
        "",
        render_lg_cost(lg),
        "",
    ]


def section_roundtrips(r: dict[str, Any]) -> list[str]:
    rt = r.get("roundtrips")
    if not rt:
        return []
    if "skipped" in rt:
        return ["## Round trips per turn", "", f"Skipped: {rt['skipped']}.", ""]
    from benchmarks.roundtrips import render as render_roundtrips

    return ["## Round trips per turn", "", render_roundtrips(rt), ""]


def section_scale(r: dict[str, Any]) -> list[str]:
    """Section `scale` (benchmarks/scale_section.py): how far one Postgres primary carries us."""
    if not r.get("scale"):
        return []
    from benchmarks.scale_report import render as render_scale

    return [render_scale(r["scale"]), ""]


def _section_profile(r: dict[str, Any]) -> list[str]:
    prof = r.get("profile")
    if not prof:
        return []
    if "skipped" in prof:
        return ["## Profile", "", f"Skipped: {prof['skipped']}.", ""]
    lines = [
        "## Profile",
        "",
        "py-spy on our service during repeated 32-customer runs (instant model), `--gil`: only",
        "samples where Python holds the GIL, i.e. where the service's one CPU-bound thread spends",
        f"its time ({prof['samples']} samples). Flame graph: `benchmarks/out/<run>/profile.svg`.",
        "",
        "| group (a sample counts for every group in its stack) | share of on-CPU samples |",
        "|---|---:|",
        *[f"| {name} | {share:.1f}% |" for name, share in prof["groups"]],
        "",
        "Self time by package (the innermost frame of each sample):",
        "",
        "| package | share |",
        "|---|---:|",
        *[f"| {name} | {share:.1f}% |" for name, share in prof.get("packages", [])[:12]],
        "",
        "Hottest leaf frames:",
        "",
        "| frame | share |",
        "|---|---:|",
        *[f"| `{frame}` | {share:.1f}% |" for frame, share in prof["leaves"]],
        "",
    ]
    return lines


def _generic(command: str, r: dict[str, Any]) -> str:
    """A command line with this run's ports, database and output folder made generic."""
    import re

    command = re.sub(r"csagent_bench_\d+", "csagent_bench_<pid>", command)
    command = re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:<port>", command)
    command = re.sub(r"--port \d+", "--port <port>", command)
    command = re.sub(r"/\S*/benchmarks/out/[^/\s]+/", "benchmarks/out/<run>/", command)
    command = re.sub(r"--tag \S+", "--tag <tag>", command)
    command = re.sub(r"--(customers|total-turns) \d+", r"--\1 <n>", command)
    return command


def _section_reproduce(r: dict[str, Any]) -> list[str]:
    lines = [
        "## Reproduce",
        "",
        "```",
        r["command"],
        "```",
        "",
        "It creates the database, seeds it once, starts every process below on free ports"
        " (a model server",
        "per latency profile, our service, the peer, the variants), runs the client processes,"
        " and drops",
        "the database. One command of each kind, as run (ports, paths and tags generic):",
        "",
        "```",
    ]
    seen: set[str] = set()
    for name, command in r.get("commands", {}).items():
        generic = _generic(command, r)
        if generic in seen:
            continue
        seen.add(generic)
        lines += [f"# {name.split(':')[0]}", generic]
    if "tps" in r.get("ceiling_b", {}):
        lines += ["# pgbench", _generic(r["ceiling_b"]["command"], r)]
    return [*lines, "```", ""]


def render(r: dict[str, Any]) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Written by `{r['command'].split('(')[0].strip()}` (benchmarks/run.py) on"
        f" {r['machine']['date']}; numbers from that run only."
        " A benchmark prints numbers; nothing here passes or fails on time.",
        "",
        "**a / b** in a cell means median / p95 over the repeated runs of that figure (with 2-3"
        " runs the",
        "p95 is close to the worst run). Latency percentiles pool every turn of every run.",
        "",
    ]
    lines += _section_machine(r)
    lines += _targets(r)
    if FINDINGS.exists():
        lines += [FINDINGS.read_text().rstrip(), ""]
    lines += _section_overhead(r)
    lines += _section_load(r)
    lines += _section_variant(r)
    lines += _section_long(r)
    lines += _section_memory(r)
    lines += _section_ceilings(r)
    lines += section_capacity(r)
    lines += section_roundtrips(r)
    lines += section_scale(r)
    lines += section_lg_cost(r)
    if r.get("features_md"):
        lines += [r["features_md"].rstrip(), ""]
    lines += _section_profile(r)
    lines += _section_reproduce(r)
    return "\n".join(lines)


def write_report(results: dict[str, Any], path: Path) -> None:
    path.write_text(render(results))


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent / "RESULTS.md"
    write_report(results, target)


if __name__ == "__main__":
    main()
