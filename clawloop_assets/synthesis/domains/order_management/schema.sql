-- Order management: an order goes draft -> placed -> paid -> shipped
-- (or placed -> on_hold while unpaid, or cancelled before any payment).
-- Stock is reserved when a line is added and leaves on_hand when the order ships.

CREATE TABLE customers (
    customer_id TEXT PRIMARY KEY,               -- CUS-0001
    name        TEXT NOT NULL UNIQUE,
    email       TEXT NOT NULL UNIQUE,
    city        TEXT NOT NULL
);

CREATE TABLE products (
    sku              TEXT PRIMARY KEY,          -- SKU-0001
    name             TEXT NOT NULL UNIQUE,
    unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents > 0)
);

CREATE TABLE stock (
    sku           TEXT PRIMARY KEY REFERENCES products (sku),
    on_hand       INTEGER NOT NULL CHECK (on_hand >= 0),
    reserved      INTEGER NOT NULL CHECK (reserved >= 0 AND reserved <= on_hand),
    reorder_level INTEGER NOT NULL CHECK (reorder_level >= 0)
);

CREATE TABLE orders (
    order_id    TEXT PRIMARY KEY,               -- ORD-0001
    customer_id TEXT NOT NULL REFERENCES customers (customer_id),
    status      TEXT NOT NULL CHECK (status IN ('draft', 'placed', 'on_hold', 'paid', 'shipped', 'cancelled')),
    hold_reason TEXT,
    CHECK ((status = 'on_hold') = (hold_reason IS NOT NULL))
);

CREATE TABLE order_lines (
    line_id          TEXT PRIMARY KEY,          -- LIN-0001
    order_id         TEXT NOT NULL REFERENCES orders (order_id),
    sku              TEXT NOT NULL REFERENCES products (sku),
    quantity         INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents > 0),  -- the price when ordered
    UNIQUE (order_id, sku)
);

CREATE TABLE payments (
    payment_id   TEXT PRIMARY KEY,              -- PAY-0001
    order_id     TEXT NOT NULL REFERENCES orders (order_id),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    method       TEXT NOT NULL CHECK (method IN ('card', 'bank_transfer', 'voucher'))
);

CREATE TABLE shipments (
    shipment_id   TEXT PRIMARY KEY,             -- SHP-0001
    order_id      TEXT NOT NULL UNIQUE REFERENCES orders (order_id),
    carrier       TEXT NOT NULL CHECK (carrier IN ('ups', 'dhl', 'postal')),
    tracking_code TEXT NOT NULL UNIQUE
);
