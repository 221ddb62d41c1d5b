"""The public help centre: article pages and search. No authentication: it is public content."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from app.api.deps import ServicesDep, limit_public
from app.api.middleware import page_headers
from app.api.schemas import ErrorBody, Text
from app.errors import NotFound
from app.help.render import PAGE_CSP, article_page
from app.help.repository import get_article
from app.help.search import MAX_QUERY_CHARS, MAX_RESULTS, search_help

router = APIRouter(tags=["help"], dependencies=[Depends(limit_public)])


class HelpResult(BaseModel):
    id: str
    title: str
    snippet: str
    url: str


class HelpResults(BaseModel):
    results: list[HelpResult]


@router.get("/help", response_model=HelpResults, responses={422: {"model": ErrorBody}})
async def search_articles(
    services: ServicesDep,
    q: Annotated[Text, Query(min_length=1, max_length=MAX_QUERY_CHARS)],
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS)] = 5,
) -> HelpResults:
    """Help articles matching `q`, best first, each with a snippet of at most 300 characters."""
    hits = await search_help(services.pool, q, limit)
    return HelpResults(
        results=[
            HelpResult(id=h.id, title=h.title, snippet=h.snippet, url=f"/help/{h.id}") for h in hits
        ]
    )


@router.get(
    "/help/{article_id}",
    response_class=HTMLResponse,
    responses={200: {"content": {"text/html": {}}}, 404: {"model": ErrorBody}},
)
async def article(services: ServicesDep, article_id: str) -> HTMLResponse:
    """One help article as an HTML page."""
    found = await get_article(services.pool, article_id)
    if found is None:
        raise NotFound("no help article with this id")
    headers = {**page_headers(PAGE_CSP), "Cache-Control": "public, max-age=300"}
    return HTMLResponse(article_page(found), headers=headers)
