-- Per (run, metric) state of the non-finite rule, and the ledger of bus messages already
-- applied (so a redelivered batch changes nothing).
CREATE TABLE metric_watch (
    run_id text NOT NULL,
    metric text NOT NULL,
    last_good_step bigint,
    last_good_value double precision,
    open_event_id uuid,
    PRIMARY KEY (run_id, metric)
);

CREATE TABLE applied_messages (
    event_id uuid PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
