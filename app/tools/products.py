"""Catalog tools: no identity needed."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.db.repository import ShopRepository
from app.tools.render import product_found
from app.tools.results import Observation, error, found
from app.tools.scope import MAX_ID_CHARS, Runtime, clip
from app.tools.snapshot import read_snapshot
from app.tools.spec import ToolDeps, read_tool
from app.tools.text import product_types_lines


# The model picks item ids from the variant list: it needs it whole.
@read_tool(
    label="Looking up product {product_id} …",
    label_fallback="Looking up a product …",
    limit=4000,
)
async def get_product_details(
    deps: ToolDeps,
    product_id: Annotated[
        str,
        Field(
            max_length=MAX_ID_CHARS,
            description="The product id, such as '6086499569'. Be careful: a product id "
            "is not an item id.",
        ),
    ],
    runtime: Runtime,
) -> Observation:
    """Get a product's variants: every item id with its options, price and availability.

    Use it to find the item ids for an exchange or an item change. Product ids are listed
    by list_all_product_types and shown in order items.
    """
    async with read_snapshot(deps.pool) as conn:
        product = await ShopRepository(conn).get_product(product_id)
    if product is None:
        return error(
            "not_found",
            f"product {clip(product_id)} was not found. Product ids are listed by "
            "list_all_product_types; item ids are not product ids.",
        )
    return product_found(product)


@read_tool(label="Browsing the catalogue …")
async def list_all_product_types(deps: ToolDeps, runtime: Runtime) -> Observation:
    """List every product type in the store as a JSON object {product name: product id}.

    Each product type has many items (variants) with their own item ids and options; use
    get_product_details on a product id to see them.
    """
    async with read_snapshot(deps.pool) as conn:
        types = await ShopRepository(conn).list_product_types()
    return found(types, product_types_lines)


TOOLS = (get_product_details, list_all_product_types)
