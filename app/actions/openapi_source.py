"""Operations of an OpenAPI 3 document, called over one pooled HTTP client per source.

Each listed `operationId` becomes a tool: its path, query and header parameters and the
properties of its JSON body are its arguments (a body that is not an object is one
argument, `body`). Local `$ref`s are followed; the document is read once, at start (or at
the first check that reaches its server).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx
import structlog
import yaml

from app.actions.file import SourceSettings
from app.actions.remote import (
    SERVER_TEXT_LIMIT,
    Answered,
    HttpOperation,
    NoAnswer,
    NotSent,
    RemoteTool,
    capped,
    placeholder,
    settings_for,
    without_argument,
)

log = structlog.get_logger(__name__)
METHODS = ("get", "head", "post", "put", "patch", "delete")
READ_METHODS = frozenset({"get", "head"})
TOKEN_HEADER = "X-Customer-Token"
MAX_REF_DEPTH = 20


class OpenApiSource:
    def __init__(self, settings: SourceSettings) -> None:
        assert settings.openapi is not None
        self.settings = settings
        self.status: Literal["ok", "down"] = "down"
        self._listed: list[RemoteTool] | None = None
        self._http: httpx.AsyncClient | None = None

    async def open(self) -> None:
        await self.check()

    def tools(self) -> list[RemoteTool]:
        if self._listed is not None:
            return self._listed
        return [placeholder(self.settings, name) for name in self.settings.operations or []]

    async def check(self) -> bool:
        try:
            if self._listed is None:
                document = await self._document()
                self._listed = self._operations(document)
            else:
                await self._client().request("HEAD", "/", timeout=self.settings.timeout_s)
            self.status = "ok"
        except Exception as error:  # unreachable, or a document we cannot read: down
            log.warning(
                "action source down",
                source=self.settings.name,
                error=type(error).__name__,
                detail=str(error) if isinstance(error, OpenApiError) else None,
            )
            self.status = "down"
        return self.status == "ok"

    async def call(
        self, tool: RemoteTool, args: Mapping[str, Any], *, key: str | None, token: str | None
    ) -> Answered:
        operation = tool.http
        if operation is None:  # the document was not read yet
            if not await self.check():
                raise NotSent()
            found = {t.name: t for t in self.tools()}.get(tool.name)
            if found is None or found.http is None:
                return Answered(False, "")
            tool, operation = found, found.http
        path, query, headers, body = _request_parts(operation, args)
        if key:
            headers["Idempotency-Key"] = key
        if token:
            headers[TOKEN_HEADER] = token
        try:
            response = await self._client().request(
                operation.method.upper(),
                path,
                params=query,
                headers=headers,
                json=body,
                timeout=self.settings.timeout_s,
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
            self.status = "down"
            raise NotSent() from None
        except httpx.TransportError:  # sent, and no answer: a read timeout, a reset
            raise NoAnswer() from None
        self.status = "ok"
        if response.status_code >= 500:
            return Answered(False, "")
        text = response.text
        if response.status_code >= 400:
            return Answered(False, capped(text, SERVER_TEXT_LIMIT))
        return Answered(True, capped(text or f"{response.status_code} {response.reason_phrase}"))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.settings.base_url or "",
                headers=dict(self.settings.headers),
                timeout=self.settings.timeout_s,
            )
        return self._http

    async def _document(self) -> dict[str, Any]:
        where = self.settings.openapi or ""
        if where.startswith(("http://", "https://")):
            response = await self._client().get(where, timeout=self.settings.timeout_s)
            response.raise_for_status()
            text = response.text
        else:
            text = await asyncio.to_thread(Path(where).read_text, encoding="utf-8")
        document = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
        if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3"):
            raise OpenApiError(f"{where} is not an OpenAPI 3 document")
        if self.settings.base_url is None:
            servers = document.get("servers") or [{}]
            base = str(servers[0].get("url") or "")
            if not base.startswith(("http://", "https://")):
                raise OpenApiError(f"{where}: set `base_url` (the document names no server)")
            await self.close()
            self.settings = self.settings.model_copy(update={"base_url": base})
        return document

    def _operations(self, document: dict[str, Any]) -> list[RemoteTool]:
        found: dict[str, RemoteTool] = {}
        for path, item in (document.get("paths") or {}).items():
            shared = item.get("parameters") or []
            for method in METHODS:
                op = item.get(method)
                if isinstance(op, dict) and op.get("operationId") in (
                    self.settings.operations or []
                ):
                    found[op["operationId"]] = self._tool(document, path, method, op, shared)
        missing = [n for n in self.settings.operations or [] if n not in found]
        if missing:
            raise OpenApiError(f"{self.settings.openapi}: no operation {', '.join(missing)}")
        return [found[n] for n in self.settings.operations or []]

    def _tool(
        self,
        document: dict[str, Any],
        path: str,
        method: str,
        op: dict[str, Any],
        shared: list[Any],
    ) -> RemoteTool:
        schema, operation = _arguments(
            document, path, method, [*shared, *op.get("parameters", [])], op
        )
        chosen = settings_for(self.settings, op["operationId"])
        return RemoteTool(
            source=self.settings.name,
            name=op["operationId"],
            description=str(op.get("description") or op.get("summary") or op["operationId"]),
            schema=without_argument(schema, self.settings.customer_argument),
            kind=chosen.kind or ("read" if method in READ_METHODS else "write"),
            idempotent=bool(chosen.idempotent),
            confirm=chosen.confirm,
            label=chosen.label or op.get("summary"),
            customer_argument=self.settings.customer_argument,
            http=operation,
        )


class OpenApiError(ValueError):
    pass


def _arguments(
    document: dict[str, Any],
    path: str,
    method: str,
    parameters: list[Any],
    op: dict[str, Any],
) -> tuple[dict[str, Any], HttpOperation]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    where: dict[str, str] = {}
    for raw in parameters:
        p = _resolved(document, raw)
        if p.get("in") not in ("path", "query", "header"):
            continue
        name = str(p["name"])
        where[name] = p["in"]
        prop = dict(_resolved(document, p.get("schema") or {"type": "string"}))
        if p.get("description"):
            prop["description"] = p["description"]
        properties[name] = prop
        if p.get("required") or p["in"] == "path":
            required.append(name)
    body: Literal["fields", "whole", "none"] = "none"
    content = (_resolved(document, op.get("requestBody") or {}).get("content")) or {}
    body_schema = (content.get("application/json") or {}).get("schema")
    if body_schema is not None:
        resolved = _resolved(document, body_schema)
        if resolved.get("type") == "object" or "properties" in resolved:
            body = "fields"
            for name, prop in (resolved.get("properties") or {}).items():
                properties[name] = _resolved(document, prop)
            required.extend(resolved.get("required") or [])
        else:
            body = "whole"
            properties["body"] = resolved
            required.append("body")
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(dict.fromkeys(required))
    return schema, HttpOperation(method=method, path=path, parameters=where, body=body)


def _resolved(document: dict[str, Any], value: Any, depth: int = 0) -> Any:
    """`value` with local `$ref`s replaced by what they point at."""
    if depth > MAX_REF_DEPTH:
        return {}
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = document
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~"), {})
            return _resolved(document, target, depth + 1)
        return {k: _resolved(document, v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(document, v, depth + 1) for v in value]
    return value


def _request_parts(
    operation: HttpOperation, args: Mapping[str, Any]
) -> tuple[str, dict[str, Any], dict[str, str], Any]:
    path = operation.path
    query: dict[str, Any] = {}
    headers: dict[str, str] = {}
    rest: dict[str, Any] = {}
    for name, value in args.items():
        place = operation.parameters.get(name)
        if place == "path":
            path = path.replace("{" + name + "}", quote(str(value), safe=""))
        elif place == "query":
            query[name] = value
        elif place == "header":
            headers[name] = str(value)
        else:
            rest[name] = value
    body: Any = None
    if operation.body == "whole":
        body = rest.get("body")
    elif operation.body == "fields" or (rest and operation.method not in READ_METHODS):
        body = rest
    return path, query, headers, body
