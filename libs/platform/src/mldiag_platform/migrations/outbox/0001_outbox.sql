-- Messages written in the same transaction as the data they announce, published after
-- commit and then deleted. Rows left by a crash are published by the next flush.
CREATE TABLE outbox (
    event_id uuid PRIMARY KEY,
    subject text NOT NULL,
    payload bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX outbox_created_at ON outbox (created_at);
