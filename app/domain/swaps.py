"""Swapping order items for other variants of the same product (modify and exchange)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from app.domain.changes import require_items_present
from app.domain.errors import RuleViolation
from app.domain.models import CENT, Order, OrderItem, Product, Variant


@dataclass(frozen=True)
class ItemSwap:
    items: tuple[OrderItem, ...]  # the order's items after the swap, in the same positions
    price_difference: Decimal  # sum(new - old), to the cent; negative means money back


def swap_items(
    order: Order,
    products: Mapping[str, Product],
    item_ids: Sequence[str],
    new_item_ids: Sequence[str],
) -> ItemSwap:
    """Replace each old item by the new item at the same list position."""
    require_items_present(order, item_ids)
    if len(item_ids) != len(new_item_ids):
        raise RuleViolation(
            f"item_ids has {len(item_ids)} ids but new_item_ids has {len(new_item_ids)}; "
            "give exactly one new item per item to change."
        )
    items = list(order.items)
    replaced: set[int] = set()
    difference = Decimal("0")
    for old_id, new_id in zip(item_ids, new_item_ids, strict=True):
        index = next(
            i for i, item in enumerate(order.items) if item.item_id == old_id and i not in replaced
        )
        replaced.add(index)
        old = order.items[index]
        variant = _replacement_variant(old, products.get(old.product_id), new_id)
        difference += variant.price - old.price
        items[index] = replace(
            old, item_id=variant.item_id, price=variant.price, options=dict(variant.options)
        )
    return ItemSwap(items=tuple(items), price_difference=difference.quantize(CENT))


def _replacement_variant(old: OrderItem, product: Product | None, new_id: str) -> Variant:
    if new_id == old.item_id:
        raise RuleViolation(
            f"new item {new_id} is the same as the item it replaces; choose different options."
        )
    variant = None
    if product is not None:
        variant = next((v for v in product.variants if v.item_id == new_id), None)
    if variant is None:
        raise RuleViolation(
            f"item {new_id} is not a variant of product {old.product_id} ({old.name}); "
            "a new item must be the same product as the item it replaces."
        )
    if not variant.available:
        raise RuleViolation(f"item {new_id} is not available; choose another variant.")
    return variant
