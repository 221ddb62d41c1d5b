"""What a path answers to: `OPTIONS` and a 405 name the methods of the API routes at that
path, and the chat page's files are served at their own paths only.

With the page's StaticFiles mounted at `/`, any request no route took in full (an
`OPTIONS`, a method a path does not have) fell through to the mount, which answered
`Allow: GET, HEAD` for every API path (issue 45).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from fastapi.routing import iter_route_contexts
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Table = list[tuple[re.Pattern[str], int, frozenset[str]]]


def route_table(routes: Sequence[BaseRoute]) -> Table:
    """Each route's path pattern, its number of parameters and its methods, included
    routers flattened (as the OpenAPI document reads them)."""
    table: Table = []
    for route in iter_route_contexts(routes):
        # a route kept out of the document only explains why its method is refused
        if route.path and route.methods and getattr(route, "include_in_schema", True):
            regex, _, convertors = compile_path(route.path)
            table.append((regex, len(convertors), frozenset(route.methods)))
    return table


def methods_at(table: Table, path: str) -> set[str]:
    """The methods of the routes whose path matches with the fewest parameters: those of
    `/lg/threads/search`, not also of `/lg/threads/{thread_id}` (as the document lists
    them, and as the router prefers the literal path)."""
    matches = [(params, methods) for regex, params, methods in table if regex.match(path)]
    if not matches:
        return set()
    fewest = min(params for params, _ in matches)
    return {m for params, methods in matches if params == fewest for m in methods}


def _allow(methods: set[str]) -> tuple[bytes, bytes]:
    return (b"allow", ", ".join(sorted(methods)).encode())


class RouteMethods:
    """`OPTIONS` on a route's path is a 204 with its methods in `Allow` (a CORS preflight
    is the CORS middleware's, outside this one); a 405 lists the methods of every route at
    that path, not just the first one the router tried. Cost only for OPTIONS and 405s."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.table: Table | None = None  # on first use: the routes are all there by then

    def _methods(self, scope: Scope) -> set[str]:
        if self.table is None:
            self.table = route_table(scope["app"].routes)
        return methods_at(self.table, scope["path"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            methods = self._methods(scope)
            if methods:
                allow = ", ".join(sorted(methods | {"OPTIONS"}))
                await Response(status_code=204, headers={"Allow": allow})(scope, receive, send)
                return

        async def listing_methods(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                methods = self._methods(scope)
                if methods:
                    kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                    message["headers"] = [*kept, _allow(methods)]
            await send(message)

        await self.app(scope, receive, listing_methods)


class PageMount(Mount):
    """The static page at `/`, matching only the paths of its files (and `/` itself), so
    an API path, an unknown path or a method a route lacks never reaches it."""

    def __init__(self, app: ASGIApp, directory: Path) -> None:
        super().__init__("/", app=app, name="static")
        files = (p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
        self.paths = frozenset({"/", *("/" + f for f in files)})

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and scope["path"] not in self.paths:
            return Match.NONE, {}
        return super().matches(scope)
