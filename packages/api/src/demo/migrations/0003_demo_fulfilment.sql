-- The three participant services of the demo's order-fulfilment saga (npm start, demo/saga/). Each owns one table,
-- written only by its participant handler inside the consumer's transaction, together with Postbox's step record
-- (saga_participation): the effect and "this step was applied" commit as one.

-- Inventory: one reservation per order, released when the saga compensates.
CREATE TABLE demo_stock_reservation (
    order_id text PRIMARY KEY,
    quantity integer NOT NULL,
    status text NOT NULL CHECK (status IN ('reserved', 'released')),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Payments: one row per order asked to pay. charges counts applied charges, so a charge applied twice would show
-- (it must never exceed 1); declined is a refusal, nothing charged.
CREATE TABLE demo_payment (
    order_id text PRIMARY KEY,
    amount_cents integer NOT NULL,
    status text NOT NULL CHECK (status IN ('charged', 'declined', 'refunded')),
    charges integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Shipping: the pivot. Once a parcel has left, nothing is undone.
CREATE TABLE demo_shipment (
    order_id text PRIMARY KEY,
    tracking_id text NOT NULL,
    shipped_at timestamptz NOT NULL DEFAULT now()
);
