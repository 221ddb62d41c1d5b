"""What a path answers to, over real HTTP: `OPTIONS` on an API path lists that path's
methods (a CORS preflight is answered as CORS), a method a path lacks is a 405 naming all
of them, and the chat page's files are served at their own paths only (issue 45: every API
path answered `OPTIONS` with the static mount's `Allow: GET, HEAD`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.config import Settings
from tests.integration.api_harness import LiveServer

ORIGIN = "https://shop.example"


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, _env_file=None, cors_origins=[ORIGIN]
    )
    live = LiveServer(settings, model=None).start()
    try:
        yield live
    finally:
        live.stop()


def allow(response: httpx.Response) -> set[str]:
    return {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}


class TestOptions:
    @pytest.mark.parametrize(
        ("path", "methods"),
        [
            ("/threads", {"GET", "POST"}),
            ("/lg/threads", {"POST"}),
            ("/lg/threads/some-thread", {"GET", "PATCH", "DELETE"}),
            ("/lg/store/items", {"GET", "PUT", "DELETE"}),
            ("/me/memory/refund_preference", {"DELETE"}),
            ("/staff/threads/noah:s1/control", {"GET", "POST"}),
        ],
    )
    def test_an_api_path_lists_its_own_methods(
        self, server: LiveServer, path: str, methods: set[str]
    ) -> None:
        response = httpx.options(server.url + path)
        assert response.status_code == 204, response.text
        assert allow(response) == methods | {"OPTIONS"}

    def test_a_cors_preflight_is_answered_as_cors(self, server: LiveServer) -> None:
        headers = {"Origin": ORIGIN, "Access-Control-Request-Method": "PATCH"}
        response = httpx.options(f"{server.url}/lg/threads/t1", headers=headers)
        assert response.status_code == 200, response.text
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert "PATCH" in response.headers["access-control-allow-methods"]

    def test_an_unknown_path_is_not_found(self, server: LiveServer) -> None:
        assert httpx.options(f"{server.url}/lg/nothing-here").status_code == 404


class TestMethodNotAllowed:
    def test_a_405_names_every_method_of_the_path(self, server: LiveServer) -> None:
        response = httpx.put(f"{server.url}/lg/threads/t1", headers=server.headers("noah"))
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert allow(response) == {"GET", "PATCH", "DELETE"}

    def test_a_post_to_the_page_is_not_allowed(self, server: LiveServer) -> None:
        response = httpx.post(f"{server.url}/threads/s1/history")
        assert response.status_code == 405
        assert allow(response) == {"GET"}


class TestPageFiles:
    def test_the_page_and_its_files_are_served_with_its_policy(self, server: LiveServer) -> None:
        for path in ("/", "/index.html", "/app.js", "/vendor/uplot/uPlot.min.css"):
            response = httpx.get(server.url + path)
            assert response.status_code == 200, path
            assert "content-security-policy" in response.headers, path

    def test_any_other_path_is_a_json_404(self, server: LiveServer) -> None:
        for path in ("/nothing.html", "/vendor/", "/lg", "/static/app.js"):
            response = httpx.get(server.url + path)
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "not_found", path
