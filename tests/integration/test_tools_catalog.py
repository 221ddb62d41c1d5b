from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool

from app.tools.registry import build_tools
from tests import factories as f


@pytest.fixture
async def tools(db: AsyncConnectionPool[Any]) -> dict[str, BaseTool]:
    await f.seed(db, customers=(f.customer(),), products=(f.bottle(unavailable=("4000",)),))
    return {t.name: t for t in build_tools(db).all}


async def text(tool: BaseTool, runtime: Any = None, **args: Any) -> str:
    return f.text_of(await f.invoke(tool, args, runtime or f.tool_runtime()))


class TestProductTools:
    async def test_product_details_list_variants_by_item_id(
        self, tools: dict[str, BaseTool]
    ) -> None:
        product = json.loads(
            await text(tools["get_product_details"], product_id="8310926033"),
            parse_float=Decimal,
        )
        assert (product["name"], product["product_id"]) == ("Water Bottle", "8310926033")
        assert product["variants"]["4000"] == {
            "item_id": "4000",
            "options": {"capacity": "4000ml"},
            "available": False,
            "price": Decimal("80.00"),
        }

    async def test_item_id_is_not_a_product_id(self, tools: dict[str, BaseTool]) -> None:
        result = await text(tools["get_product_details"], product_id="1000")
        assert result.startswith("Error: product 1000 was not found")

    async def test_product_types_map_names_to_ids(self, tools: dict[str, BaseTool]) -> None:
        assert await text(tools["list_all_product_types"]) == '{"Water Bottle":"8310926033"}'


class TestArithmeticTools:
    async def test_shipping_cost_in_cny(self, tools: dict[str, BaseTool]) -> None:
        result = await text(tools["calc_shipping"], distance_km=10, weight_kg=2.5)
        assert result == '{"shipping_cost":18.00,"currency":"CNY"}'

    async def test_float_inputs_are_read_exactly(self, tools: dict[str, BaseTool]) -> None:
        result = await text(tools["calc_shipping"], distance_km=0.1, weight_kg=0.1)
        assert json.loads(result, parse_float=Decimal)["shipping_cost"] == Decimal("5.28")

    @pytest.mark.parametrize(
        ("distance", "weight", "message"),
        [
            (-1, 1, "Error: distance_km must not be negative."),
            (1, 5000, "Error: weight_kg must be at most 1000 kg."),
            (30000, 1, "Error: distance_km must be at most 20000 km."),
        ],
    )
    async def test_out_of_range_shipping_is_an_error(
        self, tools: dict[str, BaseTool], distance: float, weight: float, message: str
    ) -> None:
        result = await text(tools["calc_shipping"], distance_km=distance, weight_kg=weight)
        assert result == message

    async def test_non_numeric_shipping_is_an_argument_error(
        self, tools: dict[str, BaseTool]
    ) -> None:
        result = await text(tools["calc_shipping"], distance_km="far", weight_kg=1)
        assert result.startswith("Error: invalid arguments (distance_km:")

    async def test_calculate_rounds_like_tau_bench(self, tools: dict[str, BaseTool]) -> None:
        assert await text(tools["calculate"], expression="(1463.70 - 200) / 3") == "421.23"

    async def test_calculate_division_by_zero_is_an_error(self, tools: dict[str, BaseTool]) -> None:
        assert await text(tools["calculate"], expression="1 / 0") == "Error: division by zero."


class TestTransferToHumanAgents:
    async def test_transfer_opens_one_ticket_and_marks_the_handoff(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        rt = f.tool_runtime(verified="sara_doe_496")
        tool = tools["transfer_to_human_agents"]
        first = await f.invoke(tool, {"summary": " wants a refund for a broken lamp "}, rt)
        again = await f.invoke(tool, {"summary": " wants a refund for a broken lamp "}, rt)
        for result in (first, again):
            assert isinstance(result, Command)
            assert result.update["handed_off"] is True  # type: ignore[index]
            assert f.text_of(result) == "Transfer successful"
        tickets = await f.rows(
            db, "SELECT customer_id, thread_id, summary, status FROM handoff_tickets"
        )
        assert tickets == [
            {
                "customer_id": "sara_doe_496",
                "thread_id": "guest_1:s1",
                "summary": "wants a refund for a broken lamp",
                "status": "open",
            }
        ]

    async def test_unverified_guest_can_be_transferred(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        result = await f.invoke(
            tools["transfer_to_human_agents"], {"summary": "asks for a human"}, f.tool_runtime()
        )
        assert isinstance(result, Command)
        [ticket] = await f.rows(db, "SELECT customer_id FROM handoff_tickets")
        assert ticket["customer_id"] is None

    async def test_blank_summary_is_refused_without_handoff(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        result = await text(tools["transfer_to_human_agents"], summary="   ")
        assert result.startswith("Error: summary must describe")
        assert await f.rows(db, "SELECT * FROM handoff_tickets") == []
