"""The agent's books, kept after each tool round: pure functions of the state and the round's
results (their artifacts), with no I/O.

- counts: calls per tool this turn (a breaker's own refusal is not a call);
- repeats: the same call with the same result a second time gets a hint, a third time
  ends the turn;
- stagnation: rounds that taught nothing new end the turn after `stagnation_rounds`;
- breakers: a tool opens after `breaker_failure_threshold` consecutive failed results, or
  when the model asks for it more than `breaker_max_calls_per_turn` times in one turn; an
  open breaker stays open for `breaker_cooldown_turns` turns (counted from the turn it opened
  in), then lets calls through half-open: one success closes it, one failure reopens it;
- cache: results stored, hits and misses counted, a write's ids invalidated;
- citations: the help articles read.

`refused_calls` decides, once per model reply, which of its calls the breakers refuse.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolCall, ToolMessage

from app.agent.cache import CACHED_NOTE, REPEAT_HINT, CacheEntry, invalidated, stored, tags_of
from app.agent.citations import citations_from
from app.agent.routing import new_tool_results
from app.agent.state import AgentState, Breaker
from app.config import Settings
from app.jsontext import canonical_json
from app.metrics import breaker_tripped
from app.tools.results import artifact_of

Refusal = Literal["breaker_open", "call_cap"]
Force = Literal["repeat", "budget", "stagnation"] | None


def keep_books(
    state: AgentState, settings: Settings, write_names: frozenset[str]
) -> dict[str, Any]:
    """The state update after the tool round just finished."""
    messages = state.get("messages") or []
    results = new_tool_results(messages)
    ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    args_by_id = {c["id"]: c["args"] for c in ai.tool_calls} if ai else {}
    turn = state.get("turn_number", 0)
    repeats, rewritten, fresh, force = repeat_guard(
        state.get("repeats") or {}, results, args_by_id, state.get("force_answer")
    )
    stale = state.get("stale_rounds", 0) + 1 if fresh == 0 else 0
    if stale >= settings.stagnation_rounds and force is None:
        force = "stagnation"
    tool_cache, stats = cache_after(
        state.get("tool_cache") or {},
        state.get("cache_stats") or {"hits": 0, "misses": 0},
        results,
        args_by_id,
        turn,
        write_names,
    )
    update: dict[str, Any] = {
        "tool_cache": tool_cache,
        "cache_stats": stats,
        "turn_tool_calls": counted(state.get("turn_tool_calls") or {}, results),
        "repeats": repeats,
        "breakers": updated_breakers(state.get("breakers") or {}, results, turn, settings),
        "force_answer": force,
        "stale_rounds": stale,
        "citations": citations_from(results, turn),
    }
    if rewritten:
        update["messages"] = rewritten
    return update


def counted(counts: Mapping[str, int], results: Iterable[ToolMessage]) -> dict[str, int]:
    out = dict(counts)
    for msg in results:
        if artifact_of(msg).get("kind") != "breaker_open":
            name = msg.name or ""
            out[name] = out.get(name, 0) + 1
    return out


def fingerprint(name: str, args: Any, content: Any) -> str:
    raw = canonical_json([name, args, content])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def repeat_guard(
    repeats: Mapping[str, int],
    results: Iterable[ToolMessage],
    args_by_id: Mapping[str | None, Any],
    force: Force,
) -> tuple[dict[str, int], list[ToolMessage], int, Force]:
    """(repeats, results rewritten with a hint, how many results were new, force)."""
    seen_now = dict(repeats)
    rewritten: list[ToolMessage] = []
    fresh = 0
    for msg in results:
        name = msg.name or ""
        raw = own_result(msg)
        key = fingerprint(name, args_by_id.get(msg.tool_call_id), raw)
        seen_now[key] = seen_now.get(key, 0) + 1
        # new content, whatever the arguments that produced it
        content_key = "content:" + fingerprint(name, None, raw)
        seen_now[content_key] = seen_now.get(content_key, 0) + 1
        fresh += seen_now[content_key] == 1
        if seen_now[key] == 2 and isinstance(msg.content, str):
            rewritten.append(msg.model_copy(update={"content": msg.content + REPEAT_HINT}))
        elif seen_now[key] >= 3:
            force = "repeat"
    return seen_now, rewritten, fresh, force


def own_result(msg: ToolMessage) -> Any:
    """The tool's result without the note a cache hit carries."""
    content = msg.content
    if isinstance(content, str) and artifact_of(msg).get("cache") == "hit":
        return content.removesuffix(CACHED_NOTE)
    return content if isinstance(content, str) else str(content)


def cache_after(
    entries: Mapping[str, CacheEntry],
    stats: Mapping[str, int],
    results: Iterable[ToolMessage],
    args_by_id: Mapping[str | None, Any],
    turn: int,
    write_names: frozenset[str],
) -> tuple[dict[str, CacheEntry], dict[str, int]]:
    out, counts = dict(entries), dict(stats)
    for msg in results:
        artifact = artifact_of(msg)
        name, args = msg.name or "", args_by_id.get(msg.tool_call_id) or {}
        mark = artifact.get("cache")
        if mark == "hit":
            counts["hits"] = counts.get("hits", 0) + 1
        elif mark == "miss":
            counts["misses"] = counts.get("misses", 0) + 1
            out = stored(out, name, args, str(msg.content), artifact, turn)
        elif name in write_names and artifact.get("outcome") != "error":
            out = invalidated(out, tags_of(artifact.get("ids", {})))
    return out, counts


def breaker_is_open(breaker: Breaker | None, turn_number: int, settings: Settings) -> bool:
    if breaker is None or breaker["opened_turn"] is None:
        return False
    return turn_number < breaker["opened_turn"] + settings.breaker_cooldown_turns


def refused_calls(
    state: AgentState, calls: Sequence[ToolCall], settings: Settings
) -> dict[str, Refusal]:
    """tool_call_id -> why the breakers refuse that call, for the calls they refuse."""
    counts = dict(state.get("turn_tool_calls") or {})
    breakers = state.get("breakers") or {}
    turn = state.get("turn_number", 0)
    refused: dict[str, Refusal] = {}
    for call in calls:
        name = call["name"]
        call_id = call["id"] or ""
        if breaker_is_open(breakers.get(name), turn, settings):
            refused[call_id] = "breaker_open"
            continue
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > settings.breaker_max_calls_per_turn:
            refused[call_id] = "call_cap"
    return refused


def updated_breakers(
    breakers: Mapping[str, Breaker],
    results: Iterable[ToolMessage],
    turn_number: int,
    settings: Settings,
) -> dict[str, Breaker]:
    out = {name: Breaker(**b) for name, b in breakers.items()}
    for msg in results:
        artifact = artifact_of(msg)
        if artifact.get("kind") in ("breaker_open", "call_cap"):
            continue  # refused by the breaker itself: not a new failure of the tool
        name = msg.name or ""
        b = out.get(name, Breaker(failures=0, opened_turn=None))
        if artifact.get("outcome") == "error":
            failures = b["failures"] + 1
            reopen = failures >= settings.breaker_failure_threshold
            out[name] = Breaker(
                failures=failures, opened_turn=turn_number if reopen else b["opened_turn"]
            )
            newly_open = reopen and b["opened_turn"] != turn_number
            if newly_open and artifact.get("kind") != "unknown_tool":
                breaker_tripped(name)  # a counter: the books' one side effect
        else:
            out[name] = Breaker(failures=0, opened_turn=None)
    return out
