"""The citations ledger: every help article the agent actually read."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TypedDict

from langchain_core.messages import ToolMessage

from app.agent.cache import without_notes

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
            article = json.loads(without_notes(str(msg.content))[0])
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
