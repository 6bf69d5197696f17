-- The demo consumer's read model (npm start): one row per order, written only by the demo projection handler
-- inside the consumer's transaction. applied_count counts applied events, so a double effect is visible (it must
-- equal version for every order). IF NOT EXISTS: older installations got it from the product chain's retired 0005.
CREATE TABLE IF NOT EXISTS demo_order_projection (
    order_id text PRIMARY KEY,
    state text NOT NULL,
    amount_cents integer,
    version bigint NOT NULL,
    applied_count integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
