"""Raw client output -> the figures of one run (all JSON-able)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks.stats import median, p95, percentile


def _lat(turns: list[dict[str, Any]], key: str) -> list[float]:
    return [t[key] for t in turns if t.get("ok") and t.get(key) is not None]


def load_run(raw: dict[str, Any], server: str | None) -> dict[str, Any]:
    turns = raw["turns"]
    ok = [t for t in turns if t["ok"]]
    latency = _lat(turns, "latency_ms")
    ttft = _lat(turns, "ttft_ms")
    cpu = raw.get("cpu", {})
    run = {
        "turns": len(turns),
        "ok": len(ok),
        "errors": len(turns) - len(ok),
        "error_kinds": dict(Counter(t["error"] for t in turns if not t["ok"])),
        "elapsed_s": raw["elapsed_s"],
        "turns_per_s": len(ok) / raw["elapsed_s"] if raw["elapsed_s"] else 0.0,
        "latency_ms": latency,
        "ttft_ms": ttft,
        "latency_p50": median(latency),
        "latency_p95": p95(latency),
        "ttft_p50": median(ttft),
        "ttft_p95": p95(ttft),
        "cpu": cpu,
    }
    if server and server in cpu and ok:
        run["server_cpu_ms_per_turn"] = 1000 * cpu[server] / len(ok)
    if ok and "machine" in cpu:  # every process: service, Postgres, model, load generator
        run["machine_cpu_ms_per_turn"] = 1000 * cpu["machine"] / len(ok)
    return run


def one_line(run: dict[str, Any]) -> str:
    return (
        f"{run['turns_per_s']:7.1f} turns/s  p50 {run['latency_p50']:7.0f} ms"
        f"  p95 {run['latency_p95']:7.0f} ms  errors {run['errors']}"
        f"  other-load {run['cpu'].get('other', 0) / max(run['cpu'].get('elapsed', 1), 1e-9):.2f}"
        " cores"
    )


def overhead_run(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu": raw.get("cpu", {})}
    for kind in ("http", "invoke", "astream"):
        rows = raw[kind]
        latency = _lat(rows, "latency_ms")
        out[kind] = {
            "n": len(rows),
            "errors": sum(not r["ok"] for r in rows),
            "p50": median(latency),
            "p95": p95(latency),
            "ttft_p50": median(_lat(rows, "ttft_ms")),
        }
    pairs = [
        h["latency_ms"] - i["latency_ms"]
        for h, i in zip(raw["http"], raw["invoke"], strict=True)
        if h["ok"] and i["ok"]
    ]
    out["paired_diff_p50"] = median(pairs)
    out["added_ms"] = out["http"]["p50"] - out["invoke"]["p50"]
    out["ratio"] = out["http"]["p50"] / out["invoke"]["p50"] if out["invoke"]["p50"] else 0.0
    out["added_vs_astream_ms"] = out["http"]["p50"] - out["astream"]["p50"]
    return out


def long_run(raw: dict[str, Any]) -> dict[str, Any]:
    levels: dict[str, Any] = {}
    for level, data in raw["levels"].items():
        turns = data["turns"]
        n = max(len(turns), 1)
        written = [t["written"] for t in turns]
        bytes_per_turn = [
            w["checkpoints_bytes"] + w["blobs_bytes"] + w["writes_bytes"] for w in written
        ]
        rows_per_turn = {
            table: sum(w[f"{table}_rows"] for w in written) / n
            for table in ("checkpoints", "blobs", "writes")
        }
        entry: dict[str, Any] = {
            "history": [t["history_messages"] for t in turns],
            "latency_ms": _lat(turns, "latency_ms"),
            "ttft_ms": _lat(turns, "ttft_ms"),
            "errors": sum(not t["ok"] for t in turns),
            "input_tokens": [t["input_tokens"] for t in turns if t.get("input_tokens")],
            "bytes_per_turn": bytes_per_turn,
            "bytes_by_table": {
                table: sum(w[f"{table}_bytes"] for w in written) / n
                for table in ("checkpoints", "blobs", "writes")
            },
            "rows_per_turn": rows_per_turn,
        }
        stats = data.get("stats")
        if stats:
            db = stats["db"]
            entry["pg"] = {
                "xact_commit_per_turn": (db["xact_commit"] - stats["own_statements"]) / n,
                "tup_inserted_per_turn": db["tup_inserted"] / n,
                "tup_updated_per_turn": db["tup_updated"] / n,
                "tables_per_turn": {
                    name: {k: v / n for k, v in t.items()} for name, t in stats["tables"].items()
                },
            }
        levels[level] = entry
    return {"build_s": raw["build_s"], "build_errors": raw["build_errors"], "levels": levels}


def memory_run(
    run: dict[str, Any],
    samples: list[tuple[float, float]],
    idle_mb: float,
    after_mb: float,
    streams: int,
) -> dict[str, Any]:
    """RSS while the most streams were open at once, from the client's open/close times."""
    raw_turns = run.pop("raw_turns", [])
    spans = [
        (t["extra"]["opened"], t["start"] + t["latency_ms"] / 1000)
        for t in raw_turns
        if t.get("extra", {}).get("opened")
    ]

    def open_at(moment: float) -> int:
        return sum(1 for a, b in spans if a <= moment <= b)

    counted = [(open_at(t), rss, t) for t, rss in samples]
    most = max((c for c, _, _ in counted), default=0)
    at_most = [rss for c, rss, _ in counted if c == most]
    peak = max((rss for _, rss in samples), default=0.0)
    rss_at_most = max(at_most, default=0.0)
    return {
        "streams": streams,
        "max_open_at_once": most,
        "idle_mb": idle_mb,
        "rss_at_max_open_mb": rss_at_most,
        "peak_mb": peak,
        "after_mb": after_mb,
        "per_stream_kb": 1024 * (rss_at_most - idle_mb) / most if most else 0.0,
        "errors": run["errors"],
        "latency_p50": run["latency_p50"],
        "samples": len(samples),
        "rss_p95_while_open": percentile(at_most, 95) if at_most else 0.0,
    }
