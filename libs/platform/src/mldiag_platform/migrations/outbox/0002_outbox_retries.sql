-- One row that cannot be published must not hold back the rows behind it: a row that fails
-- while others go out waits its own backoff (next_attempt_at), and a row that can never be
-- published (a subject the server would refuse) is parked with its reason, kept for an
-- operator, and skipped.
ALTER TABLE outbox
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN last_error text,
    ADD COLUMN parked_reason text;
DROP INDEX outbox_created_at;
CREATE INDEX outbox_due ON outbox (created_at) WHERE parked_reason IS NULL;
