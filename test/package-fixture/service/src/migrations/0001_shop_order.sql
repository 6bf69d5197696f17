-- The service's own tables: its business table and the projection its consumer keeps.
CREATE TABLE shop_order (
  order_id    text PRIMARY KEY,
  amount      integer NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shop_order_projection (
  order_id    text PRIMARY KEY,
  amount      integer NOT NULL,
  applied     integer NOT NULL DEFAULT 1
);
