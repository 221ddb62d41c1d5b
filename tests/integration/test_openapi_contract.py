"""The OpenAPI document says what the service does (issue 45), read over real HTTP: every
operation has a summary, a description and an example, documents the error statuses it can
answer with the one error body, and states the constraints the service enforces; and the
service refuses what the document refuses (`to=0.5` was accepted)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.integration.api_harness import LiveServer

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, _env_file=None)  # type: ignore[call-arg]
    live = LiveServer(settings, model=None).start()
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def document(server: LiveServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield method.upper(), path, operation


def has_example(operation: dict[str, Any]) -> bool:
    if any("example" in p or "examples" in p for p in operation.get("parameters", [])):
        return True
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    if "example" in body or "examples" in body:
        return True
    answers = operation["responses"].values()
    return any("example" in c for r in answers for c in r.get("content", {}).values())


class TestEveryOperation:
    def test_has_a_summary_a_description_and_an_example(self, document: dict[str, Any]) -> None:
        missing = [
            f"{method} {path}"
            for method, path, operation in operations(document)
            if not (operation.get("summary") and operation.get("description"))
            or not has_example(operation)
        ]
        assert len(list(operations(document))) > 50
        assert missing == []

    def test_documents_its_error_statuses_with_the_error_body(
        self, document: dict[str, Any]
    ) -> None:
        problems = []
        for method, path, operation in operations(document):
            params = operation.get("parameters", [])
            expected = set() if path == "/healthz" else {"503"}
            if any(p["name"] == "authorization" for p in params):
                expected |= {"401", "429"}
            if params or "requestBody" in operation:
                expected.add("422")
            if "requestBody" in operation:
                expected |= {"400", "413", "415"}
            if any(p["in"] == "path" for p in params):
                expected.add("404")
            responses = operation["responses"]
            if not expected <= set(responses):
                problems.append(f"{method} {path}: no {sorted(expected - set(responses))}")
            for status, answer in responses.items():
                if status.startswith(("4", "5")):
                    schema = answer["content"]["application/json"]["schema"]
                    if schema != ERROR_BODY:
                        problems.append(f"{method} {path}: {status} is not the error body")
        assert problems == []

    def test_the_rewind_by_message_is_described(self, document: dict[str, Any]) -> None:
        rewind = document["paths"]["/threads/{session_id}/rewind"]["post"]
        assert "just before that message" in rewind["description"]

    def test_every_bound_is_a_json_schema_keyword(self, document: dict[str, Any]) -> None:
        # pydantic writes a bound it cannot place as `ge`/`le`, which no generator reads
        text = json.dumps(document)
        assert not re.search(r'"(ge|le|gt|lt)": ', text)

    def test_text_parameters_state_what_they_refuse(self, document: dict[str, Any]) -> None:
        history = document["paths"]["/threads/{session_id}/history"]["get"]
        before = next(p for p in history["parameters"] if p["name"] == "before")
        assert "\\u0000" in str(before["schema"])
        cursor = next(
            p for p in document["paths"]["/threads"]["get"]["parameters"] if p["name"] == "cursor"
        )
        assert "~" in str(cursor["schema"])


class TestTheServiceRefusesWhatTheDocumentRefuses:
    def test_a_number_is_not_an_instant(self, server: LiveServer) -> None:
        headers = server.headers("staff-ana", "staff")
        for value in ("0.5", "2026-11-01", "2026-11-01T00:00:00"):
            response = httpx.get(
                f"{server.url}/staff/analytics/summary", params={"to": value}, headers=headers
            )
            assert response.status_code == 422, value
            assert response.json()["error"]["code"] == "validation_error"
        ok = httpx.get(
            f"{server.url}/staff/analytics/summary",
            params={"from": "2026-11-01T00:00:00Z", "to": "2026-12-01T00:00:00+01:00"},
            headers=headers,
        )
        assert ok.status_code == 200, ok.text

    def test_a_period_that_ends_before_it_starts_is_empty(self, server: LiveServer) -> None:
        response = httpx.get(
            f"{server.url}/staff/analytics/summary",
            params={"from": "2026-12-01T00:00:00Z", "to": "2026-11-01T00:00:00Z"},
            headers=server.headers("staff-ana", "staff"),
        )
        assert response.status_code == 200, response.text

    def test_a_cursor_of_the_documented_form_is_a_position(self, server: LiveServer) -> None:
        headers = server.headers("noah_brown_6181")
        for cursor in ("0~a", "99999999999999999~zz-_9"):
            page = httpx.get(f"{server.url}/threads", params={"cursor": cursor}, headers=headers)
            assert page.status_code == 200, page.text
        bad = httpx.get(f"{server.url}/threads", params={"cursor": "eyJhIjoxfQ"}, headers=headers)
        assert bad.status_code == 422
