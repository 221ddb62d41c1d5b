"""The gold run skips the tools that change no data; which ones those are comes from the
tool specs, so a tool added tomorrow is sorted without anyone editing a list."""

from __future__ import annotations

from typing import Any

from app.db.writes import WriteAction
from app.eval.gold import NO_DATA_CHANGE, no_data_change
from app.tools.registry import SPECS, WRITE_TOOL_NAMES
from app.tools.spec import Confirm, read_tool, write_tool


async def look_up_loyalty_points(deps: Any, user_id: str, runtime: Any) -> Any:
    """A read added after this test was written."""
    raise AssertionError("never called")


def grant_loyalty_points(session: Any, user_id: str) -> WriteAction:
    """A write added after this test was written."""
    raise AssertionError("never called")


def test_a_new_read_tool_is_taken_as_changing_no_data() -> None:
    spec = read_tool(label="Looking up points …")(look_up_loyalty_points)
    assert spec.name not in NO_DATA_CHANGE
    assert spec.name in no_data_change({**SPECS, spec.name: spec})


def test_a_new_write_tool_is_applied_unless_it_changes_no_data() -> None:
    asked = write_tool(label="Granting …", confirm=Confirm("Grant points"))(grant_loyalty_points)
    assert asked.name not in no_data_change({**SPECS, asked.name: asked})
    unasked = write_tool(label="Granting …", confirm=Confirm("Grant points"), asks=False)(
        grant_loyalty_points
    )
    assert unasked.name in no_data_change({**SPECS, unasked.name: unasked})


def test_every_read_and_the_hand_over_change_no_data_and_every_other_write_does() -> None:
    reads = {name for name, spec in SPECS.items() if spec.access == "read"}
    assert reads <= NO_DATA_CHANGE
    assert "transfer_to_human_agents" in NO_DATA_CHANGE
    assert "think" in NO_DATA_CHANGE  # tau-bench's, not ours
    changing_no_data = NO_DATA_CHANGE & WRITE_TOOL_NAMES
    assert changing_no_data == {"transfer_to_human_agents"}
