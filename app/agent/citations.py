"""The citations ledger: every help article the agent actually read, and the stagnation
guard that stops a turn going round in circles."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TypedDict

from langchain_core.messages import ToolMessage

READ_ARTICLE_TOOL = "get_help_article"
SNIPPET_CHARS = 240


class Citation(TypedDict):
    id: str
    title: str
    snippet: str
    turn: int


def merge_citations(left: list[Citation] | None, right: list[Citation] | None) -> list[Citation]:
    """Append reducer, de-duplicated by article id (the latest read wins its turn)."""
    merged = {c["id"]: c for c in left or []}
    for c in right or []:
        merged[c["id"]] = c
    return list(merged.values())


def citations_from(results: Iterable[ToolMessage], turn: int) -> list[Citation]:
    found: list[Citation] = []
    for msg in results:
        if msg.name != READ_ARTICLE_TOOL or msg.status == "error":
            continue
        try:
            article = json.loads(str(msg.content).split("\n(cached")[0])
        except ValueError:
            continue
        if not isinstance(article, dict) or not article.get("id"):
            continue
        body = " ".join(str(article.get("body", "")).split())
        snippet = body if len(body) <= SNIPPET_CHARS else body[: SNIPPET_CHARS - 1] + "…"
        found.append(
            Citation(
                id=str(article["id"]),
                title=str(article.get("title", "")),
                snippet=snippet,
                turn=turn,
            )
        )
    return found


def turn_citations(ledger: Sequence[Citation], turn: int) -> list[Citation]:
    return [c for c in ledger if c["turn"] == turn]


def is_stale_round(
    new_citations: Sequence[Citation], known: Sequence[Citation], fresh_results: int
) -> bool:
    """A round that taught the agent nothing: no article it had not read, no new content."""
    known_ids = {c["id"] for c in known}
    return fresh_results == 0 and all(c["id"] in known_ids for c in new_citations)
