-- The demo order service's business table (npm start). Not used by Postbox itself: it shows the business
-- change and its outbox row committed in one transaction, with a version for optimistic concurrency.
CREATE TABLE demo_order (
    order_id text PRIMARY KEY,
    state text NOT NULL CHECK (state IN ('placed', 'paid', 'shipped', 'delivered')),
    amount_cents integer NOT NULL,
    version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
