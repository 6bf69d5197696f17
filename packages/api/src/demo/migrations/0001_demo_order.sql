-- The demo order service's business table (npm start). Not Postbox's: it shows the business change and its outbox
-- row committed in one transaction, with a version for optimistic concurrency. IF NOT EXISTS: installations from
-- before the demo had its own migration scope got this table from the product chain (its retired 0004).
CREATE TABLE IF NOT EXISTS demo_order (
    order_id text PRIMARY KEY,
    state text NOT NULL CHECK (state IN ('placed', 'paid', 'shipped', 'delivered')),
    amount_cents integer NOT NULL,
    version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
