"""One spec per tool: everything that lists tools is derived from it."""

from __future__ import annotations

import re
from typing import Any, cast

from app.tools.labels import LABELS_FILE
from app.tools.registry import SPECS, WRITE_TOOL_NAMES, build_tools, page_labels_module
from app.tools.spec import ShopTool


class TestSpecs:
    def test_the_tool_set_is_built_from_the_specs(self) -> None:
        tools = build_tools(cast(Any, None))  # the pool is only used when a tool runs
        assert [t.name for t in tools.all] == list(SPECS)
        assert {t.name for t in tools.write} == WRITE_TOOL_NAMES
        assert all(isinstance(t, ShopTool) and t.spec is SPECS[t.name] for t in tools.all)

    def test_every_write_has_a_confirmation_line_and_none_is_cached(self) -> None:
        for name in WRITE_TOOL_NAMES:
            spec = SPECS[name]
            assert spec.confirm is not None and spec.confirm.generic, name
            assert not spec.cacheable, name

    def test_a_label_names_only_the_tools_own_arguments(self) -> None:
        tools = {t.name: t for t in build_tools(cast(Any, None)).all}
        for name, spec in SPECS.items():
            for key in re.findall(r"\{(\w+)\}", spec.label):
                assert key == "order" or key in tools[name].args, (name, key)

    def test_a_tool_renders_in_the_format_its_graph_asks_for(self) -> None:
        tool = build_tools(cast(Any, None)).read[0]
        assert isinstance(tool, ShopTool)
        assert tool.observation_format == "json"  # the tau-bench output until bound
        assert tool.bound("text").observation_format == "text"
        assert tool.bound("json") is tool


class TestPageLabels:
    def test_the_pages_labels_are_generated_from_the_specs(self) -> None:
        """Run `python -m app.tools.labels` after changing a tool's label."""
        assert LABELS_FILE.read_text(encoding="utf-8") == page_labels_module()

    def test_every_tool_has_a_label(self) -> None:
        module = page_labels_module()
        assert all(f'"{name}"' in module for name in SPECS)
