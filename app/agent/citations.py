"""The citations ledger: every help article the agent actually read."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from langchain_core.messages import ToolMessage

from app.tools.results import artifact_of


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
    """The articles the results read (their artifacts name them), fresh or from the cache."""
    found: list[Citation] = []
    for msg in results:
        artifact = artifact_of(msg)
        article = artifact.get("article")
        if article is None or artifact.get("outcome") != "ok":
            continue
        found.append(
            Citation(
                id=article["id"], title=article["title"], snippet=article["snippet"], turn=turn
            )
        )
    return found
