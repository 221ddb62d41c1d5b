"""The soak's own shop: customers with many pending orders, inserted in a few statements.

The demo shop has about 30 pending orders; a soak cancels thousands. Each customer gets a
card and `orders_each` pending orders of one item, paid in full, so every cancellation
refunds exactly one payment: a second refund of one order is a write that ran twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

PRODUCT_ID = "9900000001"
ITEM_ID = "9900000101"
PRICE = "42.00"


def customer_id(i: int) -> str:
    return f"chaos_c{i:03d}"


def email_of(customer: str) -> str:
    return f"{customer.replace('_', '.')}@chaos.example"


def order_id(i: int, j: int) -> str:
    return f"#W{8_000_000 + i * 1000 + j:07d}"


@dataclass
class Shop:
    """Who owns what, and each customer's orders not yet handed to a client."""

    customers: list[str]
    orders_each: int
    fresh: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def plan(cls, customers: int, orders_each: int) -> Shop:
        ids = [customer_id(i) for i in range(customers)]
        shop = cls(ids, orders_each)
        for i, c in enumerate(ids):
            shop.fresh[c] = [order_id(i, j) for j in range(orders_each)]
        return shop

    def take_order(self, customer: str) -> str | None:
        """A pending order nobody has asked about yet (each is cancelled at most once)."""
        orders = self.fresh[customer]
        return orders.pop() if orders else None

    def orders_of(self, customer: str) -> list[str]:
        i = self.customers.index(customer)
        return [order_id(i, j) for j in range(self.orders_each)]

    def owner_of(self, private: str) -> str:
        """The customer a customer id, email or order id (client.PRIVATE) belongs to."""
        if private.startswith("#W"):
            return customer_id((int(private[2:]) - 8_000_000) // 1000)
        if "@" in private:
            return private.split("@")[0].replace(".", "_")
        return private

    def insert(self, url: str) -> None:
        n, k = len(self.customers), self.orders_each
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            conn.execute(
                "INSERT INTO products (id, name) VALUES (%s, 'Chaos mug') ON CONFLICT DO NOTHING",
                (PRODUCT_ID,),
            )
            conn.execute(
                "INSERT INTO variants (item_id, product_id, options, price, available)"
                ' VALUES (%s, %s, \'{"color": "grey"}\', %s, true) ON CONFLICT DO NOTHING',
                (ITEM_ID, PRODUCT_ID, PRICE),
            )
            conn.execute(
                """INSERT INTO customers (id, first_name, last_name, email, address1, city,
                                          state, country, zip)
                   SELECT format('chaos_c%%s', lpad(i::text, 3, '0')), 'Chaos',
                          format('Customer%%s', i),
                          format('chaos.c%%s@chaos.example', lpad(i::text, 3, '0')),
                          format('%%s Soak Street', i), 'Austin', 'TX', 'USA', '78701'
                   FROM generate_series(0, %s - 1) AS i""",
                (n,),
            )
            conn.execute(
                """INSERT INTO payment_methods (id, customer_id, source, brand, last_four)
                   SELECT format('credit_card_99%%s', lpad(i::text, 5, '0')),
                          format('chaos_c%%s', lpad(i::text, 3, '0')), 'credit_card', 'visa',
                          lpad(i::text, 4, '0')
                   FROM generate_series(0, %s - 1) AS i""",
                (n,),
            )
            orders = """SELECT i, j, format('#W%%s', 8000000 + i * 1000 + j) AS id
                        FROM generate_series(0, %s - 1) AS i, generate_series(0, %s - 1) AS j"""
            conn.execute(
                f"""INSERT INTO orders (id, customer_id, position, address1, city, state,
                                        country, zip, status)
                    SELECT o.id, format('chaos_c%%s', lpad(o.i::text, 3, '0')), o.j,
                           format('%%s Soak Street', o.i), 'Austin', 'TX', 'USA', '78701',
                           'pending'
                    FROM ({orders}) AS o""",
                (n, k),
            )
            conn.execute(
                f"""INSERT INTO order_items (order_id, position, product_id, item_id, name,
                                             price, options)
                    SELECT o.id, 0, %s, %s, 'Chaos mug', %s, '{{"color": "grey"}}'
                    FROM ({orders}) AS o""",
                (PRODUCT_ID, ITEM_ID, PRICE, n, k),
            )
            conn.execute(
                f"""INSERT INTO payment_transactions (order_id, position, transaction_type,
                                                      amount, payment_method_id)
                    SELECT o.id, 0, 'payment', %s,
                           format('credit_card_99%%s', lpad(o.i::text, 5, '0'))
                    FROM ({orders}) AS o""",
                (PRICE, n, k),
            )
