"""py-spy on the service under load: a flame graph, and a table of where the CPU goes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# Inclusive groups: a sample counts for a group when any frame of its stack matches.
GROUPS = {
    "checkpointer (langgraph.checkpoint.postgres)": ("langgraph/checkpoint/postgres",),
    "checkpoint serialisation (serde)": ("langgraph/checkpoint/serde",),
    "LangGraph runtime (pregel, channels)": ("langgraph/pregel", "langgraph/channels"),
    "model client (openai SDK + langchain_openai)": ("openai/", "langchain_openai/", "httpx"),
    "langchain_core (messages, callbacks, runnables)": ("langchain_core/",),
    "psycopg (all SQL)": ("psycopg/", "psycopg_pool/"),
    "SSE response (sse_starlette)": ("sse_starlette/",),
    "HTTP server (uvicorn, starlette, fastapi)": ("uvicorn/", "starlette/", "fastapi/"),
    "pydantic": ("pydantic/", "pydantic_core"),
    "json encode/decode (stdlib json)": ("json/encoder", "json/decoder", "json/__init__"),
    "app/ code (own frames)": ("app/",),
}


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def start(pid: int, out_dir: Path, seconds: int) -> list[subprocess.Popen[bytes]] | None:
    binary = py_spy()
    if binary is None:
        return None
    common = [binary, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "100"]
    log = (out_dir / "py-spy.log").open("ab")
    return [
        subprocess.Popen(
            [*common, "--gil", "--format", "raw", "-o", str(out_dir / "profile.txt")],
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*common, "--format", "flamegraph", "-o", str(out_dir / "profile.svg")],
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
    ]


def finish(recorders: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    for r in recorders:
        try:
            r.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            r.terminate()
            r.wait(timeout=10)


def summarise(raw: Path, top: int = 15) -> dict[str, Any]:
    """Shares of on-CPU (GIL-holding) samples: inclusive by group, and the hottest leaves."""
    if not raw.exists():
        return {"skipped": "no profile was recorded"}
    leaves: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        leaves[frames[-1]] += n
        for name, needles in GROUPS.items():
            if any(needle in frame for frame in frames for needle in needles):
                groups[name] += n
    if total == 0:
        return {"skipped": "the profile is empty"}
    return {
        "samples": total,
        "groups": [(name, 100 * groups[name] / total) for name in GROUPS],
        "leaves": [(frame, 100 * n / total) for frame, n in leaves.most_common(top)],
    }
