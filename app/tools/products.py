"""Catalog tools: no identity needed."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool
from pydantic import Field

from app.db.repository import ShopRepository
from app.jsontext import compact_json
from app.tools.base import make_tool
from app.tools.render import product_json
from app.tools.scope import MAX_ID_CHARS, Runtime, clip
from app.tools.snapshot import read_snapshot


def product_read_tools(pool: AsyncConnectionPool[Any]) -> list[BaseTool]:
    async def get_product_details(
        product_id: Annotated[
            str,
            Field(
                max_length=MAX_ID_CHARS,
                description="The product id, such as '6086499569'. Be careful: a product id "
                "is not an item id.",
            ),
        ],
        runtime: Runtime,
    ) -> str:
        """Get a product's variants: every item id with its options, price and availability.

        Use it to find the item ids for an exchange or an item change. Product ids are listed
        by list_all_product_types and shown in order items.
        """
        async with read_snapshot(pool) as conn:
            product = await ShopRepository(conn).get_product(product_id)
        if product is None:
            return (
                f"Error: product {clip(product_id)} was not found. Product ids are listed by "
                "list_all_product_types; item ids are not product ids."
            )
        return product_json(product)

    async def list_all_product_types(runtime: Runtime) -> str:
        """List every product type in the store as a JSON object {product name: product id}.

        Each product type has many items (variants) with their own item ids and options; use
        get_product_details on a product id to see them.
        """
        async with read_snapshot(pool) as conn:
            types = await ShopRepository(conn).list_product_types()
        return compact_json(types)

    return [
        make_tool("get_product_details", get_product_details),
        make_tool("list_all_product_types", list_all_product_types),
    ]
