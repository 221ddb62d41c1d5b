"""Names at start: an OpenAPI document (a file) read into tools, and a tool name that is
taken refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.actions.catalog import Actions, ActionsError
from app.actions.file import parse_actions
from app.tools.registry import SPECS


def openapi_document(operation_id: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/orders/{order_id}": {
                "get": {
                    "operationId": operation_id,
                    "summary": "An order.",
                    "parameters": [
                        {"name": "order_id", "in": "path", "schema": {"type": "string"}}
                    ],
                }
            }
        },
    }


class TestNames:
    async def test_a_tool_named_like_a_built_in_one_is_refused(self, tmp_path: Path) -> None:
        doc = tmp_path / "shop.json"
        doc.write_text(json.dumps(openapi_document("get_order_details")))
        text = (
            f"sources:\n  - name: shop\n    openapi: {doc}\n"
            "    base_url: http://127.0.0.1:9\n    operations: [get_order_details]\n"
        )
        file = parse_actions(text, "a.yaml", {})
        with pytest.raises(ActionsError, match="'get_order_details' of source 'shop'"):
            await Actions.open(None, file, SPECS)

    async def test_two_sources_may_not_share_a_tool_name(self, tmp_path: Path) -> None:
        doc = tmp_path / "a.json"
        doc.write_text(json.dumps(openapi_document("lookUp")))
        text = "sources:\n" + "".join(
            f"  - name: {n}\n    openapi: {doc}\n    base_url: http://127.0.0.1:9\n"
            "    operations: [lookUp]\n"
            for n in ("one", "two")
        )
        with pytest.raises(ActionsError, match="tool of source 'one'"):
            await Actions.open(None, parse_actions(text, "a.yaml", {}), ())

    async def test_an_operation_reads_as_a_tool_from_its_document(self, tmp_path: Path) -> None:
        doc = tmp_path / "a.json"
        doc.write_text(json.dumps(openapi_document("lookUp")))
        text = (
            f"sources:\n  - name: one\n    openapi: {doc}\n    base_url: http://127.0.0.1:9\n"
            "    operations: [lookUp]\n"
        )
        actions = await Actions.open(None, parse_actions(text, "a.yaml", {}), ())
        tool = actions.tools["lookUp"]
        assert (tool.kind, tool.idempotent, tool.description) == ("read", False, "An order.")
        assert tool.schema["required"] == ["order_id"]
        await actions.close()
