"""py-spy on the service under load: a flame graph, and a table of where the CPU goes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# Inclusive groups: a sample counts for a group when a frame of its stack is in one of the
# group's files. py-spy prints paths from the package root (langgraph's namespace packages
# lose their `langgraph/` prefix: pregel/, checkpoint's postgres/ and serde/).
GROUPS = {
    "openai SDK (builds requests, parses each stream chunk into models)": ("openai/",),
    "langchain_openai (ChatOpenAI: chunk -> AIMessageChunk)": ("langchain_openai/",),
    "HTTP client to the model (aiohttp under httpx2)": ("httpx", "httpcore", "aiohttp"),
    "langchain_core (messages, callbacks, runnables)": ("langchain_core/",),
    "LangGraph runtime (pregel, channels, stream handlers)": (
        "pregel/",
        "_internal/",
        "channels/",
        "graph/",
    ),
    "checkpointer (PostgresCheckpointer, AsyncPostgresSaver)": (
        "app/db/checkpointer",
        "postgres/",
        "checkpoint/",
    ),
    "checkpoint serialisation (serde)": ("serde/",),
    "psycopg (all SQL)": ("psycopg/", "psycopg_pool/"),
    "SSE response (sse_starlette, incl. its socket writes)": ("sse_starlette/",),
    "uvicorn / starlette / fastapi request handling": (
        "uvicorn/protocols",
        "starlette/",
        "fastapi/",
    ),
    "app/runs + app/api (run service, events, routes)": ("app/runs/", "app/api/"),
    "app/agent (nodes, trimming, routing, tool execution)": ("app/agent/",),
    "app/tools + app/db (tool bodies, SQL)": ("app/tools/", "app/db/"),
    "pydantic": ("pydantic/", "pydantic_core/"),
    "stdlib json": ("json/",),
}


def _path(frame: str) -> str:
    """'func (pkg/mod.py:12)' -> 'pkg/mod.py'."""
    inner = frame.rpartition("(")[2]
    return inner.rpartition(":")[0]


def _package(frame: str) -> str:
    path = _path(frame)
    head = path.split("/")[0]
    if head in ("pregel", "_internal", "channels", "graph"):
        return "langgraph"
    if head in ("postgres", "serde"):
        return "langgraph-checkpoint"
    if head == "app":
        return "/".join(path.split("/")[:2])
    return head.removesuffix(".py") or path


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
    packages: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        paths = [_path(f) for f in frames]
        total += n
        leaves[frames[-1]] += n
        packages[_package(frames[-1])] += n
        for name, prefixes in GROUPS.items():
            if any(p.startswith(prefixes) for p in paths):
                groups[name] += n
    if total == 0:
        return {"skipped": "the profile is empty"}
    return {
        "samples": total,
        "groups": [(name, 100 * groups[name] / total) for name in GROUPS],
        "packages": [(name, 100 * n / total) for name, n in packages.most_common(top)],
        "leaves": [(frame, 100 * n / total) for frame, n in leaves.most_common(top)],
    }
