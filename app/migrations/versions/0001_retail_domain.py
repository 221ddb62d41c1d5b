"""Retail domain: customers, payment methods, products, orders; write ledger and audit.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.execute("""
    CREATE TABLE customers (
        id          text PRIMARY KEY,
        first_name  text NOT NULL,
        last_name   text NOT NULL,
        email       text NOT NULL,
        address1    text NOT NULL,
        address2    text NOT NULL DEFAULT '',
        city        text NOT NULL,
        state       text NOT NULL,
        country     text NOT NULL,
        zip         text NOT NULL
    );
    CREATE INDEX customers_email_idx ON customers (lower(email));
    CREATE INDEX customers_name_zip_idx ON customers (lower(first_name), lower(last_name), zip);

    CREATE TABLE payment_methods (
        id           text PRIMARY KEY,
        customer_id  text NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
        source       text NOT NULL CHECK (source IN ('credit_card', 'gift_card', 'paypal')),
        brand        text,
        last_four    text,
        balance      numeric(12,2),
        position     int NOT NULL DEFAULT 0,
        CHECK (source <> 'gift_card' OR balance IS NOT NULL),
        CHECK (balance IS NULL OR balance >= 0)
    );
    CREATE INDEX payment_methods_customer_idx ON payment_methods (customer_id);

    CREATE TABLE products (
        id    text PRIMARY KEY,
        name  text NOT NULL
    );

    CREATE TABLE variants (
        item_id     text PRIMARY KEY,
        product_id  text NOT NULL REFERENCES products(id) ON DELETE CASCADE,
        options     jsonb NOT NULL DEFAULT '{}'::jsonb,
        price       numeric(12,2) NOT NULL CHECK (price >= 0),
        available   boolean NOT NULL,
        position    int NOT NULL DEFAULT 0
    );
    CREATE INDEX variants_product_idx ON variants (product_id);

    CREATE TABLE orders (
        id           text PRIMARY KEY,
        customer_id  text NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
        -- position of the order in the customer's order list (kept for round trips)
        position     int NOT NULL DEFAULT 0,
        address1     text NOT NULL,
        address2     text NOT NULL DEFAULT '',
        city         text NOT NULL,
        state        text NOT NULL,
        country      text NOT NULL,
        zip          text NOT NULL,
        status       text NOT NULL CHECK (status IN (
                         'pending', 'processed', 'delivered', 'cancelled',
                         'pending (item modified)', 'return requested', 'exchange requested')),
        cancel_reason               text,
        return_items                jsonb,
        return_payment_method_id    text,
        exchange_items              jsonb,
        exchange_new_items          jsonb,
        exchange_payment_method_id  text,
        exchange_price_difference   numeric(12,2),
        updated_at   timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX orders_customer_idx ON orders (customer_id, position);

    CREATE TABLE order_items (
        order_id    text NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
        position    int NOT NULL,
        product_id  text NOT NULL,
        item_id     text NOT NULL,
        name        text NOT NULL,
        price       numeric(12,2) NOT NULL,
        options     jsonb NOT NULL DEFAULT '{}'::jsonb,
        PRIMARY KEY (order_id, position)
    );

    CREATE TABLE fulfillments (
        order_id      text NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
        position      int NOT NULL,
        tracking_ids  jsonb NOT NULL,
        item_ids      jsonb NOT NULL,
        PRIMARY KEY (order_id, position)
    );

    CREATE TABLE payment_transactions (
        order_id           text NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
        position           int NOT NULL,
        transaction_type   text NOT NULL CHECK (transaction_type IN ('payment', 'refund')),
        amount             numeric(12,2) NOT NULL CHECK (amount >= 0),
        payment_method_id  text NOT NULL,
        PRIMARY KEY (order_id, position)
    );

    -- One row per executed write, keyed by its idempotency key: a repeat returns `outcome`.
    CREATE TABLE tool_executions (
        idempotency_key  text PRIMARY KEY,
        thread_id        text NOT NULL,
        user_id          text,
        tool_name        text NOT NULL,
        arguments        jsonb NOT NULL,
        ok               boolean NOT NULL,
        outcome          text NOT NULL,
        created_at       timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX tool_executions_thread_idx ON tool_executions (thread_id);

    CREATE TABLE audit_log (
        id           bigserial PRIMARY KEY,
        actor        text NOT NULL,
        customer_id  text,
        thread_id    text NOT NULL,
        tool_name    text NOT NULL,
        arguments    jsonb NOT NULL,
        ok           boolean NOT NULL,
        outcome      text NOT NULL,
        idempotency_key text,
        created_at   timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX audit_log_thread_idx ON audit_log (thread_id);

    CREATE TABLE handoff_tickets (
        id           bigserial PRIMARY KEY,
        customer_id  text,
        thread_id    text NOT NULL,
        summary      text NOT NULL,
        status       text NOT NULL DEFAULT 'open',
        created_at   timestamptz NOT NULL DEFAULT now()
    );
    """)
