"""Data for the fuzzer to reach past the 404: for each role, threads with turns, runs,
checkpoints, messages, store items and memory, read back over HTTP as any client would.

Everything goes through the service's own API (and the demo model), so what is seeded is
what a client could have made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

TURNS = ("where is my order?", "how long do refunds take?")
HANDOFF = "I want to talk to a human agent please"


@dataclass
class Seeded:
    """Ids that exist, by the path or field they are used in."""

    sessions: list[str] = field(default_factory=list)
    lg_threads: list[str] = field(default_factory=list)
    staff_threads: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    # one thread's own, for the paths that name a thread and its run or checkpoint
    native_runs: list[str] = field(default_factory=list)
    lg_runs: list[str] = field(default_factory=list)
    lg_checkpoints: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    store_namespaces: list[str] = field(default_factory=list)
    store_keys: list[str] = field(default_factory=list)
    memory_keys: list[str] = field(default_factory=list)
    assistants: list[str] = field(default_factory=list)
    articles: list[str] = field(default_factory=list)


def _ok(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise RuntimeError(
            f"seeding: {response.request.method} {response.request.url.path} "
            f"answered {response.status_code}: {response.text[:300]}"
        )
    return response.json() if response.content else None


def _native_thread(http: httpx.Client, session: str, into: Seeded) -> None:
    for content in TURNS:
        _ok(http.post(f"/threads/{session}/messages", json={"content": content}))
    history = _ok(http.get(f"/threads/{session}/history", params={"limit": 20}))
    into.checkpoints += [i["checkpoint_id"] for i in history["items"] if i.get("checkpoint_id")]
    state = _ok(http.get(f"/threads/{session}/state"))
    into.messages += [m["id"] for m in state["messages"] if m.get("id")]
    runs = _ok(http.get(f"/threads/{session}/runs"))
    into.native_runs += [r["run_id"] for r in runs["items"]]
    into.runs += into.native_runs
    into.sessions.append(session)


def _handed_off(http: httpx.Client, session: str, into: Seeded) -> None:
    """A thread the agent handed to a person (the customer asked; a handoff asks no
    confirmation), so staff have a queue to work on."""
    handed = _ok(http.post(f"/threads/{session}/messages", json={"content": HANDOFF}))
    if handed.get("status") == "interrupted":  # a deployment that confirms it after all
        _ok(http.post(f"/threads/{session}/resume", json={"decision": "approve"}))
    into.sessions.append(session)


def _lg_thread(http: httpx.Client, into: Seeded) -> None:
    thread = _ok(http.post("/lg/threads", json={"metadata": {"channel": "fuzz", "vip": True}}))
    thread_id = thread["thread_id"]
    run = {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    _ok(http.post(f"/lg/threads/{thread_id}/runs/wait", json=run))
    into.lg_runs += [r["run_id"] for r in _ok(http.get(f"/lg/threads/{thread_id}/runs"))]
    into.runs += into.lg_runs
    history = _ok(http.get(f"/lg/threads/{thread_id}/history"))
    into.lg_checkpoints += [
        h["checkpoint"]["checkpoint_id"] for h in history if h.get("checkpoint")
    ]
    into.checkpoints += into.lg_checkpoints
    into.lg_threads.append(thread_id)
    into.sessions.append(thread_id)  # the same conversation under the native API


def _store(http: httpx.Client, user_id: str, *, memory: bool, into: Seeded) -> None:
    notes = ["users", user_id, "notes"]
    item = {"namespace": notes, "key": "first", "value": {"n": 1, "tag": "x"}}
    http.put("/lg/store/items", json=item).raise_for_status()
    into.store_namespaces.append(".".join(notes))
    into.store_keys.append("first")
    if memory:  # a customer's own: the agent's memory of them
        mine = ["users", user_id, "memory"]
        entry = {"namespace": mine, "key": "refund_preference", "value": {"value": "card"}}
        http.put("/lg/store/items", json=entry).raise_for_status()
        into.store_namespaces.append(".".join(mine))
        into.store_keys.append("refund_preference")
        into.memory_keys.append("refund_preference")


def _common(http: httpx.Client, into: Seeded) -> None:
    assistants = _ok(http.post("/lg/assistants/search", json={}))
    into.assistants += ["agent", *(a["assistant_id"] for a in assistants)]
    found = _ok(http.get("/help", params={"q": "refund"}))
    into.articles += [r["id"] for r in found["results"]]


def seed_user(base_url: str, token: str, user_id: str, role: str) -> Seeded:
    """A customer's or a guest's: a native thread with two turns, a LangGraph thread with a
    run, store items (and a customer's memory)."""
    seeded = Seeded()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
        _native_thread(http, f"fuzz-{role}", seeded)
        _handed_off(http, f"fuzz-{role}-human", seeded)
        _lg_thread(http, seeded)
        _store(http, user_id, memory=role == "customer", into=seeded)
        _common(http, seeded)
    return seeded


def seed_staff(base_url: str, token: str) -> Seeded:
    """Staff see every conversation: the ids of those the other roles made, and one taken
    over, so the control and message routes reach a thread a person holds."""
    seeded = Seeded()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
        listed = _ok(http.get("/staff/threads", params={"control": "all", "limit": 50}))
        seeded.staff_threads += [t["thread_id"] for t in listed["items"]]
        if seeded.staff_threads:
            held = seeded.staff_threads[0]
            control = _ok(http.get(f"/staff/threads/{held}/control"))
            take = {"action": "take_over", "version": control["version"]}
            _ok(http.post(f"/staff/threads/{held}/control", json=take))
        _common(http, seeded)
    return seeded
