"""Help-centre tools: search the shop's policy articles and read one. No identity needed."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from app.help.repository import get_article
from app.help.search import MAX_QUERY_CHARS, MAX_RESULTS, search_help
from app.tools.results import Article, Observation, error, found
from app.tools.scope import Runtime, clip
from app.tools.spec import ToolDeps, read_tool
from app.tools.text import generic_lines

MAX_BODY_CHARS = 2000
SNIPPET_CHARS = 240  # of an article read, for the citations ledger


@read_tool(label="Searching the help centre …", done="Help centre searched")
async def search_help_center(
    deps: ToolDeps,
    query: Annotated[
        str,
        Field(
            description="What the customer wants to know, in a few words, such as "
            "'how long do refunds take' or 'change shipping address'.",
            max_length=MAX_QUERY_CHARS,
        ),
    ],
    runtime: Runtime,
    max_results: Annotated[
        int, Field(description="How many articles to return, 1 to 10.", ge=1, le=MAX_RESULTS)
    ] = 5,
) -> Observation:
    """Search the shop's help centre: articles on returns, exchanges, cancellations,
    refunds and their timing, changing an order, payment methods, gift cards, shipping
    costs and times, damaged items, identity checks, privacy and human agents.

    Returns {"results": [{"id", "title", "snippet"}]}, best match first. A snippet is only
    an excerpt: read the article with get_help_article before answering from it. Answer
    policy questions only from articles you have read, and say which article you used;
    if no article covers the question, say so instead of guessing.
    """
    if not query.strip():
        return error(
            "invalid_arguments",
            "query must not be empty; describe the customer's question in words.",
        )
    hits = await search_help(deps.pool, query, max_results)
    if not hits:
        return found(
            f"No help articles matched '{clip(query.strip())}'. Try other or fewer words; "
            "if nothing covers the question, do not guess a policy."
        )
    results = [{"id": h.id, "title": h.title, "snippet": h.snippet} for h in hits]
    return found(
        {"results": results},
        lambda value: generic_lines("search_help_center", value),
        ids={"article": [h.id for h in hits]},
    )


# An article's body is cut at 2,000 characters; the model needs all of it.
@read_tool(label="Reading a help article …", limit=2400, done="Article read")
async def get_help_article(
    deps: ToolDeps,
    article_id: Annotated[
        str,
        Field(
            description="The article id from search_help_center, such as 'refund-timing'.",
            max_length=200,
        ),
    ],
    runtime: Runtime,
) -> Observation:
    """Read one help-centre article: {"id", "title", "updated", "body"}.

    Base your answer to a policy question on the body, and name the article's title.
    A long body is cut at 2,000 characters with a "note" saying so; the full article is
    on the help page the note names.
    """
    wanted = article_id.strip()
    article = await get_article(deps.pool, wanted)
    if article is None:
        return error(
            "not_found",
            f"no help article with id '{clip(wanted)}'; use search_help_center to find one.",
        )
    view: dict[str, Any] = {
        "id": article.id,
        "title": article.title,
        "updated": article.updated.isoformat(),
        "body": article.body,
    }
    if len(article.body) > MAX_BODY_CHARS:
        view["body"] = cut_body(article.body)
        view["note"] = (
            f"the body was cut at {MAX_BODY_CHARS:,} of its {len(article.body):,} "
            f"characters; the full article is at /help/{article.id}."
        )
    return found(
        view,
        lambda value: generic_lines("get_help_article", value),
        ids={"article": [article.id]},
        article=Article(id=article.id, title=article.title, snippet=snippet(view["body"])),
    )


TOOLS = (search_help_center, get_help_article)


def snippet(body: str) -> str:
    flat = " ".join(body.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def cut_body(body: str, limit: int = MAX_BODY_CHARS) -> str:
    """At most `limit` characters, ending at a paragraph, line or word break when one is near."""
    head = body[:limit]
    for sep in ("\n\n", "\n", " "):
        at = head.rfind(sep)
        if at >= limit * 3 // 4:
            return head[:at].rstrip()
    return head
