"""Compare cs-agent's /lg surface with the official LangGraph server, on demand (not in CI).

    python tools/lg_conformance.py [--cs-url URL --cs-token JWT]

It builds its own virtualenv under benchmarks/out/lgdev-venv with the official server
(`langgraph-cli[inmem]`, pinned below), serves tools/lg_toy_graph.py (a turn shaped like
cs-agent's: a write asked for, a confirmation interrupt, the approved write, a streamed
answer) with `langgraph dev`, and starts cs-agent with its demo model unless --cs-url is
given. Then both get the same requests through raw HTTP, and the event names and order,
the keys of each payload, and the headers are compared. The report goes to stdout and to
benchmarks/out/lg-conformance.md; docs/langgraph-api.md records the last one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
VENV = OUT / "lgdev-venv"
APP = OUT / "lgdev-app"
OFFICIAL = ["langgraph-cli[inmem]==0.4.40", "langgraph-api==0.16.7", "langgraph==1.2.24"]
CUSTOMER = "james_evans_5777"
MESSAGE = "cancel order #W6295317, I ordered it by mistake"
READ = "where is my order #W6295317?"
MODES = ["values", "messages-tuple", "updates", "custom"]
HEADERS = ("content-type", "location", "content-location", "cache-control")

Event = tuple[str, Any, str | None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_up(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not come up")


@contextmanager
def official_server() -> Iterator[str]:
    if not (VENV / "bin" / "langgraph").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *OFFICIAL], check=True)
    APP.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tools" / "lg_toy_graph.py", APP / "toy_graph.py")
    (APP / "langgraph.json").write_text(
        json.dumps(
            {
                "dependencies": ["."],
                "graphs": {"agent": "./toy_graph.py:graph", "lookup": "./toy_graph.py:lookup"},
            }
        )
    )
    port = free_port()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGGRAPH_NO_ANALYTICS": "1"}
    command = [str(VENV / "bin" / "langgraph"), "dev", "--port", str(port), "--no-browser"]
    with open(OUT / "lgdev.log", "w") as log:
        process = subprocess.Popen(
            [*command, "--no-reload"], cwd=APP, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            wait_up(f"http://127.0.0.1:{port}/info")
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


@contextmanager
def cs_agent(url: str | None, token: str | None) -> Iterator[tuple[str, str]]:
    python = str(ROOT / ".venv" / "bin" / "python")
    if token is None:
        token = subprocess.run(
            [python, "-m", "app", "token", CUSTOMER],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    if url is not None:
        yield url.rstrip("/"), token
        return
    port = free_port()
    with open(OUT / "cs-agent.log", "w") as log:
        process = subprocess.Popen(
            [python, "-m", "app", "serve", "--port", str(port)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_up(f"http://127.0.0.1:{port}/healthz")
            yield f"http://127.0.0.1:{port}/lg", token
        finally:
            process.terminate()
            process.wait(timeout=30)


def sse(
    client: httpx.Client, method: str, path: str, **options: Any
) -> tuple[list[Event], dict[str, str]]:
    events: list[Event] = []
    name, data, event_id = "", "", None
    with client.stream(method, path, **options) as response:
        response.raise_for_status()
        headers = {k: response.headers[k] for k in HEADERS if k in response.headers}
        for line in response.iter_lines():
            if line.startswith(":"):
                continue
            if not line:
                if name:
                    events.append((name, json.loads(data) if data else None, event_id))
                name, data, event_id = "", "", None
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data += value
            elif field == "id":
                event_id = value
    return events, headers


def shape(value: Any) -> Any:
    """Keys (recursively for the first item of lists of objects), not values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value and isinstance(value[0], dict | list) else "list"
    return type(value).__name__


def sequence(events: list[Event]) -> list[str]:
    """Event names in order, runs of `messages` collapsed: the number of tokens differs."""
    out: list[str] = []
    for name, data, _ in events:
        label = name
        if name == "values" and isinstance(data, dict) and "__interrupt__" in data:
            label = "values(__interrupt__)"
        if name == "updates" and isinstance(data, dict):
            label = f"updates({','.join(sorted(data))})"
        if out and out[-1] == label == "messages":
            continue
        out.append(label)
    return out


def modes_sequence(events: list[Event]) -> list[str]:
    """The `messages` and `tools` modes' events in order, each named by what it carries
    (the message's type, the tool event), repeats collapsed (the number of pieces
    differs)."""
    out: list[str] = []
    for name, data, _ in events:
        label = name
        if name.startswith("messages/") and name != "messages/metadata":
            label = f"{name}({data[0].get('type')})"
        elif name == "tools" and isinstance(data, dict):
            label = f"tools({data.get('event')})"
        if not out or out[-1] != label:
            out.append(label)
    return out


def modes_scenario(client: httpx.Client, assistant: str) -> dict[str, Any]:
    """A read turn (a tool, then a streamed answer) in the `messages` and `tools` modes."""
    report: dict[str, Any] = {}
    for modes in (["messages"], ["tools"]):
        thread_id = client.post("/threads", json={}).json()["thread_id"]
        body = {
            "assistant_id": assistant,
            "input": {"messages": [{"type": "human", "content": READ}]},
            "stream_mode": modes,
        }
        try:
            events, _ = sse(client, "POST", f"/threads/{thread_id}/runs/stream", json=body)
        except httpx.HTTPStatusError as refused:  # a mode this server does not stream
            report[f"{modes[0]}_mode"] = {"refused": refused.response.status_code}
            continue
        shapes: dict[str, Any] = {}
        for name, data, _ in events:
            label = modes_sequence([(name, data, None)])[0]
            shapes.setdefault(label, shape(data))
        report[f"{modes[0]}_mode"] = {"sequence": modes_sequence(events), "payloads": shapes}
    return report


def scenario(base: str, token: str, lookup: str = "agent") -> dict[str, Any]:
    report: dict[str, Any] = {}
    headers = {"x-api-key": token}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        report["info"] = sorted(client.get("/info").json())
        thread = client.post("/threads", json={}).json()
        report["thread"] = shape(thread)
        thread_id = thread["thread_id"]
        body = {
            "assistant_id": "agent",
            "input": {"messages": [{"type": "human", "content": MESSAGE}]},
            "stream_mode": MODES,
            "stream_resumable": True,
        }
        first, first_headers = sse(client, "POST", f"/threads/{thread_id}/runs/stream", json=body)
        run_id = first[0][1]["run_id"]
        report["stream"] = {
            "headers": sorted(first_headers),
            "location": first_headers.get("location", "")
            .replace(thread_id, "{thread}")
            .replace(run_id, "{run}"),
            "sequence": sequence(first),
            "ids": all(e[2] for e in first),
            "payloads": {name: shape(data) for name, data, _ in first},
        }
        report["thread_interrupted"] = client.get(f"/threads/{thread_id}").json()["status"]
        state = client.get(f"/threads/{thread_id}/state").json()
        report["state"] = shape(state)
        resume = {
            "assistant_id": "agent",
            "command": {"resume": {"decisions": [{"type": "approve"}]}},
            "stream_mode": MODES,
        }
        second, _ = sse(client, "POST", f"/threads/{thread_id}/runs/stream", json=resume)
        report["resume"] = {
            "sequence": sequence(second),
            "ids": any(e[2] for e in second),
        }
        report["history"] = shape(
            client.post(f"/threads/{thread_id}/history", json={"limit": 3}).json()
        )
        joined, join_headers = sse(
            client,
            "GET",
            f"/threads/{thread_id}/runs/{run_id}/stream",
            headers={"Last-Event-ID": "-1"},
        )
        report["join_replay"] = {"sequence": sequence(joined), "headers": sorted(join_headers)}
        report["run"] = shape(client.get(f"/threads/{thread_id}/runs/{run_id}").json())
        report["thread_after"] = client.get(f"/threads/{thread_id}").json()["status"]
        missing = client.get("/threads/00000000-0000-0000-0000-000000000000")
        report["missing_thread"] = missing.status_code
        report |= modes_scenario(client, lookup)
    return report


def compare(official: dict[str, Any], ours: dict[str, Any]) -> str:
    lines = ["# /lg conformance: official `langgraph dev` vs cs-agent", ""]
    for key in official:
        same = official[key] == ours.get(key)
        lines.append(f"## {key}: {'same' if same else 'differs'}")
        if not same:
            lines += [
                "official:",
                "```json",
                json.dumps(official[key], indent=1),
                "```",
                "cs-agent:",
                "```json",
                json.dumps(ours.get(key), indent=1),
                "```",
            ]
        else:
            lines += ["```json", json.dumps(official[key], indent=1), "```"]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cs-url", help="a running cs-agent's /lg base URL (default: start one)")
    parser.add_argument("--cs-token", help="a JWT for it (default: `python -m app token`)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with official_server() as url:
        official = scenario(url, "unused", lookup="lookup")
    with cs_agent(args.cs_url, args.cs_token) as (url, token):
        ours = scenario(url, token)
    report = compare(official, ours)
    (OUT / "lg-conformance.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
