"""The help articles that ship with the code, one `<id>.md` file each beside this module.

A file reads:

    # Title
    updated: 2026-11-16

    Body: paragraphs separated by blank lines, "- " bullet lists and "1. " numbered lists.

The file name is the article's id, a lowercase slug such as `refund-timing`. The text is
content, not markup: the page escapes it, the model reads it as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from importlib import resources

ARTICLE_ID_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_ARTICLE_ID_LENGTH = 100
_UPDATED_RE = re.compile(r"updated:\s*(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class HelpArticle:
    id: str
    title: str
    body: str
    updated: date


def is_article_id(text: str) -> bool:
    return len(text) <= MAX_ARTICLE_ID_LENGTH and ARTICLE_ID_RE.fullmatch(text) is not None


def parse_article(article_id: str, text: str) -> HelpArticle:
    """Read one article file; ValueError names the file's problem."""
    if not is_article_id(article_id):
        raise ValueError(f"help article id {article_id!r} is not a lowercase slug")
    lines = text.strip().splitlines()
    if len(lines) < 4 or not lines[0].startswith("# ") or lines[2].strip():
        raise ValueError(
            f"help article {article_id}: expected '# Title', 'updated: YYYY-MM-DD', "
            "a blank line, then the body"
        )
    updated = _UPDATED_RE.fullmatch(lines[1].strip())
    if updated is None:
        raise ValueError(f"help article {article_id}: second line must be 'updated: YYYY-MM-DD'")
    title = lines[0][2:].strip()
    body = "\n".join(line.rstrip() for line in lines[3:]).strip()
    if not title or not body:
        raise ValueError(f"help article {article_id}: title and body must not be empty")
    return HelpArticle(article_id, title, body, date.fromisoformat(updated.group(1)))


def shipped_articles() -> tuple[HelpArticle, ...]:
    """Every `*.md` article in this package, sorted by id."""
    files = [f for f in resources.files(__package__).iterdir() if f.name.endswith(".md")]
    articles = [parse_article(f.name.removesuffix(".md"), f.read_text("utf-8")) for f in files]
    return tuple(sorted(articles, key=lambda a: a.id))
